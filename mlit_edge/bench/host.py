"""The host: resident memory (current and peak), Jetson's NvMap memory, and the environment a
report records (CPU, GPU, threads, library versions; on Jetson the power mode and clocks)."""
from __future__ import annotations

import importlib.metadata as md
import logging
import os
import platform
import resource
import shutil
import subprocess
from pathlib import Path

from ..artifacts.schema import ArtifactRecord
from ..model.budget import available_mb, batch_bytes
from ..devices.trt_env import local_env
from ..base.values import default_threads

logger = logging.getLogger(__name__)


def rss_mb() -> float:
    """The current resident set size (Linux /proc; peak RSS elsewhere)."""
    try:
        pages = int(Path("/proc/self/statm").read_text().split()[1])
        return pages * os.sysconf("SC_PAGE_SIZE") / 2 ** 20
    except (OSError, ValueError, IndexError):
        return peak_rss_mb()


def peak_rss_mb() -> float:
    """This process's peak resident set size.

    Linux's VmHWM belongs to the address space, which exec replaces; getrusage's ru_maxrss survives
    exec, so a child started from a large parent would report the parent's peak as its own.
    """
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024  # kB
    except (OSError, ValueError, IndexError):
        pass
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / 2 ** 20 if platform.system() == "Darwin" else peak / 1024  # bytes on macOS, kB elsewhere


def check_memory(records: list[ArtifactRecord], batches: tuple[int, ...]) -> None:
    """Refuse a batch whose buffers would not fit this machine's available memory; warn when close."""
    from ..model.records import record_config

    available = available_mb()
    if available is None:
        return
    b = max(batches)
    need = max(batch_bytes(record_config(r.config), b) for r in records or [ArtifactRecord()]) / 2 ** 20
    if need > 0.8 * available:
        raise ValueError(f"--batch {b}: one call needs about {need / 1024:.1f} GiB of buffers (estimated), more "
                         f"than the {available / 1024:.1f} GiB available here; time a smaller batch")
    if need > 0.4 * available:
        logger.warning(f"warning: batch {b} needs about {need / 1024:.1f} GiB (estimated) of the "
                       f"{available / 1024:.1f} GiB available; timings may include swapping or the run may be "
                       "killed")


def nvmap_mb() -> float | None:
    """Jetson: memory the GPU driver has mapped (NvMapMemUsed in /proc/meminfo); None elsewhere.
    On Jetson the GPU shares DRAM, so cudaMemGetInfo does not tell what the engine holds."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("NvMapMemUsed:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return None


def _command_output(cmd: list[str]) -> str | None:
    if not shutil.which(cmd[0]):
        return None
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=10).stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None


def environment(threads: int | None = None) -> dict:
    """CPU/GPU, threads and library versions; on Jetson also the power mode and clocks."""
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    libs = {}
    for dist in ("numpy", "onnx", "onnxruntime", "torch", "tensorrt", "tensorrt-rtx-cu13", "cuda-python", "mlit-edge"):
        try:
            libs[dist] = md.version(dist)
        except md.PackageNotFoundError:
            continue
    env = local_env("tensorrt")
    out = {"cpu": cpu, "cores": os.cpu_count(), "threads": threads or default_threads(),
           "platform": platform.platform(), "python": platform.python_version(), "libraries": libs,
           "gpu": {"name": env.gpu_name, "compute_capability": env.compute_capability, "cuda": env.cuda_version},
           "l4t": env.l4t, "jetpack": env.jetpack}
    if env.l4t:  # Jetson: the numbers mean little without the power mode and clocks
        out["power_mode"] = _command_output(["nvpmodel", "-q"])
        out["clocks"] = _command_output(["jetson_clocks", "--show"])
    return out
