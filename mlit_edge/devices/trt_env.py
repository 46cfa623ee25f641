"""What a TensorRT engine is tied to, and the checks made before one is deserialized.

`tensorrt` (JetPack, x86 CUDA) and `tensorrt_rtx` (PyPI, builds without a GPU) are imported lazily
through `import_trt`, so this module imports anywhere. `verify_plan` proves, before any
deserialization and on the very bytes that will be deserialized: the sha256 against the sidecar,
the TensorRT module and version, and the GPU's compute capability. A mismatch is one line that says
how to rebuild.
"""
from __future__ import annotations

import logging
import platform
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from typing import TYPE_CHECKING

from ..base.messages import printable, require_file
from ..artifacts.schema import ArtifactRecord, check_record
from ..artifacts.sidecar import read_sidecar
from ..artifacts.targets import MODULES, TABLE
from ..base.textfile import read_bytes, read_json, read_text

logger = logging.getLogger(__name__)

if TYPE_CHECKING:  # the API this module is type-checked against (tensorrt-stubs, tools/typecheck_trt.py)
    import tensorrt as trt


class EngineError(RuntimeError):
    """A plan that must not be deserialized here (tampered, another TensorRT, another GPU)."""


def _import(name: str):
    """The module `name`, when it is TensorRT itself: type stubs alone (`pip install tensorrt-stubs` puts a
    bare `tensorrt/__init__.pyi` in site-packages) import as an empty namespace package, not an API."""
    module = __import__(name)
    if not hasattr(module, "Builder"):
        raise ImportError(f"{name} is only a namespace package here (type stubs?), not TensorRT")
    return module


def import_trt(target: str | None = None):
    """The TensorRT module of `target` ("tensorrt" or "tensorrt-rtx"), or a one-line error naming what
    to install. Without a target: `tensorrt` where installed, else `tensorrt_rtx`, else None."""
    if target is None:
        for name in (m for t, m in MODULES.items() if TABLE[t].parser_graph):  # TensorRT's own, not OpenVINO
            try:
                return _import(name)
            except ImportError:
                continue
        return None
    name = MODULES[target]
    try:
        return _import(name)
    except ImportError:
        raise RuntimeError(f"--target {target}: the `{name}` module is not installed ({TABLE[target].install})") \
            from None


@dataclass(frozen=True)
class DeviceEnv:
    """What an engine is tied to: the TensorRT build and the GPU (None where there is none)."""

    trt_module: str | None
    trt_version: str | None
    gpu_name: str | None = None
    compute_capability: str | None = None  # "8.7"
    cuda_version: str | None = None  # the CUDA toolkit (/usr/local/cuda/version.json), else the driver's
    l4t: str | None = None  # Jetson Linux release, e.g. "R36.4.3"
    jetpack: str | None = None
    platform: str = ""
    module: str | None = None  # the Jetson module (/proc/device-tree/model): AGX Orin, Orin NX and Orin Nano are all sm_87


def import_cudart():
    """cuda-python's CUDA runtime module, by the path the installed version has: `cuda.bindings.runtime` from 12.6
    (13.0 has only that), `cuda.cudart` in JetPack 5.1's 11.8.2 and 6.0's 12.2.1 (tests/standins/data/
    cuda_python.json); a one-line RuntimeError naming what to install where there is none."""
    try:
        from cuda.bindings import runtime as cudart
    except ImportError:
        try:
            from cuda import cudart
        except ImportError:
            raise RuntimeError("the TensorRT runner needs cuda-python (pip install 'cuda-python>=12.2,<13')") from None
    return cudart


def _cuda_props() -> tuple[str | None, str | None, str | None]:
    """GPU 0's name, compute capability and the CUDA runtime version, via cuda-python or nvidia-smi."""
    try:
        cudart = import_cudart()
        err, count = cudart.cudaGetDeviceCount()
        if int(err) == 0 and count > 0:
            err, props = cudart.cudaGetDeviceProperties(0)
            # the driver's CUDA, not cudaRuntimeGetVersion: cuda-python's cudart answers that with its own build
            # constant (11.8.2's cuda/_lib/ccudart/ccudart.pyx returns _CUDART_VERSION), 11.8 on a CUDA 11.4 JetPack
            _, ver = cudart.cudaDriverGetVersion()
            name = props.name.decode(errors="replace").rstrip("\0") if isinstance(props.name, bytes) else str(props.name)
            return name, f"{props.major}.{props.minor}", f"{ver // 1000}.{ver % 1000 // 10}"
        return None, None, None
    except Exception:  # not installed, or no driver: fall through to nvidia-smi
        pass
    smi = shutil.which("nvidia-smi")
    if smi:
        try:
            out = subprocess.run([smi, "--query-gpu=name,compute_cap", "--format=csv,noheader"], capture_output=True,
                                 text=True, timeout=10).stdout.strip().splitlines()
            if out:
                name, cap = (s.strip() for s in out[0].split(","))
                return name, cap, None
        except (OSError, subprocess.SubprocessError, ValueError):
            pass
    return None, None, None


def cuda_toolkit(path: str = "/usr/local/cuda/version.json") -> str | None:
    """The installed CUDA toolkit's major.minor (JetPack and the CUDA installers write version.json), or None."""
    try:
        version = read_json(path, "CUDA version file")["cuda"]["version"]
        return ".".join(str(version).split(".")[:2])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _jetson() -> tuple[str | None, str | None]:
    """(L4T release, JetPack version) on a Jetson; (None, None) elsewhere."""
    l4t = jetpack = None
    release = Path("/etc/nv_tegra_release")
    if release.is_file():
        m = re.search(r"R(\d+)\s*\(release\),\s*REVISION:\s*([\d.]+)", read_text(release, "L4T release file", errors="replace"))
        if m:
            l4t = f"R{m.group(1)}.{m.group(2)}"
    if l4t and shutil.which("dpkg-query"):
        try:
            jetpack = subprocess.run(["dpkg-query", "-W", "-f=${Version}", "nvidia-jetpack"], capture_output=True,
                                     text=True, timeout=10).stdout.strip() or None
        except (OSError, subprocess.SubprocessError):
            pass
    return l4t, jetpack


def jetson_module(path: str = "/proc/device-tree/model") -> str | None:
    """The board's model string on a Jetson ("NVIDIA Jetson AGX Orin Developer Kit"); None elsewhere."""
    try:
        text = read_bytes(path, "device-tree model").decode("utf-8", errors="replace").replace("\0", "").strip()
    except (OSError, ValueError):
        return None
    return text[:200] or None


def jetson_tensorrt() -> str | None:
    """The TensorRT version of this machine when it is a Jetson (L4T) whose TensorRT imports; None elsewhere.
    An export on the device takes that TensorRT's profile; a workstation exports for any JetPack."""
    if not Path("/etc/nv_tegra_release").is_file():
        return None
    try:
        return import_trt("tensorrt").__version__
    except RuntimeError:
        return None


def local_env(target: str | None = None) -> DeviceEnv:
    """This machine, as an engine sees it. `target` picks the TensorRT flavour to report."""
    trt = None
    if target:
        try:
            trt = import_trt(target)
        except RuntimeError:  # not installed: the env says "no TensorRT"
            trt = None
    name, cap, cuda = _cuda_props()
    cuda = cuda_toolkit() or cuda  # the toolkit TensorRT links against where it is installed, else the driver's
    l4t, jetpack = _jetson()
    return DeviceEnv(trt.__name__ if trt else None, trt.__version__ if trt else None, name, cap, cuda, l4t, jetpack,
                     f"{platform.system()} {platform.machine()}", jetson_module() if l4t else None)


def rebuild_hint(record: ArtifactRecord) -> str:
    src = record.source_onnx or "model.onnx"
    return f"rebuild it here: mlit-edge build --onnx {src} --precision {record.precision} --target " \
           f"{record.target or 'tensorrt'}"


def check_compatible(record: ArtifactRecord, env: DeviceEnv, force: bool = False) -> None:
    """Raise EngineError (one line, with the rebuild command) unless `env` can run the plan of `record`.
    `force`: run a plan built on another Jetson module of the same GPU (the user knows better; said)."""
    # every line quotes the sidecar (module, version, GPU, module name): escaped here, not only by the CLI, since
    # the Python API raises and logs them as they are
    if record.builder_module != env.trt_module or record.builder_version != env.trt_version:
        have = f"{env.trt_module} {env.trt_version}" if env.trt_module else "no TensorRT"
        raise EngineError(printable(f"{record.artifact} was built with {record.builder_module} "
                                    f"{record.builder_version}; this machine has {have}; {rebuild_hint(record)}"))
    if env.compute_capability is None:
        raise EngineError(printable(f"{record.artifact}: no CUDA GPU on this machine, and a TensorRT engine "
                                    "needs one to deserialize (use the .onnx with ONNX Runtime here)"))
    want = record.device.get("compute_capability")
    if want is not None and want != env.compute_capability:
        raise EngineError(printable(f"{record.artifact} was built for {record.device.get('gpu_name')} "
                                    f"(sm_{want.replace('.', '')}); this GPU is {env.gpu_name} "
                                    f"(sm_{env.compute_capability.replace('.', '')}); {rebuild_hint(record)}"))
    # AGX Orin, Orin NX and Orin Nano share sm_87: the compute capability does not tell them apart, and a plan's
    # tactics are timed on one module's clocks and memory
    built_on = record.device.get("module")
    if built_on and env.module and built_on != env.module:
        if not force:
            raise EngineError(printable(f"{record.artifact} was built on a {built_on}; this is a "
                                        f"{env.module}; {rebuild_hint(record)} (or pass --force to run it anyway)"))
        logger.warning(printable(f"warning: --force: running {record.artifact}, built on a {built_on}, "
                                 f"on this {env.module}"))


def verify_plan(plan: str | Path, env: DeviceEnv | None = None, content: bytes | None = None,
                force: bool = False) -> ArtifactRecord:
    """The plan's sidecar record once the plan is proven intact and runnable here and its fields are
    checked (`schema.check_record`; nothing is deserialized). `content`: the plan's bytes as they will be
    deserialized, hashed instead of the file. Every refusal is an EngineError or FileNotFoundError with one
    line."""
    plan = require_file(plan)
    try:
        data = read_sidecar(plan, content=content)
    except ValueError as e:
        raise EngineError(str(e)) from None
    record = ArtifactRecord.from_json(data)
    if record.kind != "tensorrt-engine":
        raise EngineError(f"{plan}: its sidecar describes a {record.kind or 'non-engine'} artifact, not a "
                          "TensorRT engine")
    check_compatible(record, env or local_env(record.target or "tensorrt"), force)
    check_record(data, plan)
    return record


def deserialize(content: bytes, record: ArtifactRecord, plan: str | Path) -> trt.ICudaEngine:
    """TensorRT's engine from plan bytes that `verify_plan` passed."""
    if TYPE_CHECKING:
        import tensorrt as api
    else:  # at run time, the module the plan was built with (tensorrt or tensorrt_rtx)
        api = import_trt(record.target or "tensorrt")
    runtime = api.Runtime(api.Logger(api.Logger.ERROR))
    dla_core = record.dla_core
    if dla_core is not None:
        # IRuntime::setDLACore (NvInferRuntime.h, release/8.5-10.13): the DLA core the engine executes on,
        # -1 by default, set before deserializeCudaEngine, as trtexec does with --useDLACore; without it two
        # plans built for two cores share one
        runtime.DLA_core = int(dla_core)
    engine = runtime.deserialize_cuda_engine(content)
    if engine is None:
        raise EngineError(f"TensorRT could not deserialize {plan}; {rebuild_hint(record)}")
    return engine


def load_engine(plan: str | Path, env: DeviceEnv | None = None) -> tuple[trt.ICudaEngine, ArtifactRecord]:
    """Read the plan once, verify those bytes (sha256, TensorRT version, GPU), then deserialize them.

    Returns (engine, sidecar record).
    """
    plan = require_file(plan)
    content = plan.read_bytes()
    record = verify_plan(plan, env, content)
    return deserialize(content, record, plan), record
