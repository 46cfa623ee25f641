"""What the before/after benchmarks (runtime_memory.py, serve_faults.py) share: this checkout beside an earlier
revision in a temporary git worktree, and a command run with its memory capped, so that a case that once took
tens of gigabytes is killed at the cap instead of taking the machine down with it. Linux only (it reads /proc
and reaps with wait4)."""
from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

ROOT = Path(__file__).resolve().parent.parent


def random_xxs_onnx(folder: Path) -> Path:
    """An XXS export with random weights (memory and bookkeeping do not depend on them), by this checkout."""
    model = folder / "mlit-xxs-fp32.onnx"
    subprocess.run([sys.executable, "-m", "mlit_edge.cli", "export", "--size", "xxs", "--random-weights", "--out",
                    str(model)], cwd=ROOT, check=True, capture_output=True)
    return model


@contextlib.contextmanager
def trees(before: str | None, folder: Path) -> Iterator[dict[str, Path]]:
    """{"this checkout": ROOT} and, with `before`, that revision checked out under `folder` (removed after)."""
    found = {"this checkout": ROOT}
    if before:
        found[before] = folder / "before"
        subprocess.run(["git", "worktree", "add", "--detach", str(found[before]), before], cwd=ROOT, check=True,
                       capture_output=True)
    try:
        yield found
    finally:
        if before:
            subprocess.run(["git", "worktree", "remove", "--force", str(found[before])], cwd=ROOT, capture_output=True)


@dataclass
class Outcome:
    code: int | None  # the exit status; None when it was killed at the cap
    peak_mb: float  # the kernel's peak RSS of the process (wait4's ru_maxrss)
    lines: list[str]  # what it wrote to stderr

    @property
    def last(self) -> str:
        return self.lines[-1] if self.lines else ""


def run_capped(args: list[str], cwd: Path, env: dict, cap_mb: float) -> Outcome:
    """Run `args`, stdout discarded, killing it once its RSS passes `cap_mb`."""
    with tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(args, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=err)
        capped = False
        while True:  # reaped by wait4 here, not by Popen, so that its rusage (the peak RSS) is ours to read
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            try:
                pages = int(Path(f"/proc/{proc.pid}/statm").read_text().split()[1])
            except (OSError, IndexError, ValueError):
                pages = 0
            if pages * os.sysconf("SC_PAGE_SIZE") / 2 ** 20 > cap_mb:
                os.kill(proc.pid, signal.SIGKILL)
                capped = True
            time.sleep(0.02)
        err.seek(0)
        lines = err.read().decode(errors="replace").strip().splitlines()
    return Outcome(None if capped else os.waitstatus_to_exitcode(status), usage.ru_maxrss / 1024, lines)
