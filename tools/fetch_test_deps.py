"""Fetch what the tests read but `pip install -e '.[dev]'` cannot install, into `.cache/` in the checkout.

    python tools/fetch_test_deps.py    # part of the README's test command; does nothing for what is cached

Two things, both from the package index, both kept out of the environment:
- TensorRT 10.13's type stubs (`tensorrt-stubs`), unpacked and repaired by tools/typecheck_trt.py, which
  tests/engine/test_api.py runs mypy with (the wheel depends on TensorRT itself, and installed it would
  shadow `tensorrt` with an empty package);
- cuda-python 12.2.1, JetPack 6.0's version, installed with `--no-deps --target` into a folder of its own,
  where tests/engine/test_api.py looks up the `cuda.cudart` names the runner uses (the environment has a
  newer cuda-python, whose path is `cuda.bindings.runtime`).

And one from Debian's packages, where none is installed: `python3-gi` (PyGObject), whose GLib.KeyFile parses
the DeepStream configs in tests/runtime/test_deepstream.py as DeepStream itself reads them (installed as
root with apt-get; elsewhere the line printed says what to install).

The tests download nothing: when something is missing they fail, naming this command.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tools import typecheck_trt  # noqa: E402

COMMAND = typecheck_trt.FETCH_COMMAND
CUDA_PYTHON = "cuda-python==12.2.1"
CUDA_PYTHON_DIR = ROOT / ".cache" / "cuda-python-12.2.1"


def cuda_python_cached(folder: Path = CUDA_PYTHON_DIR) -> bool:
    return (folder / "cuda_python-12.2.1.dist-info").is_dir() and (folder / "cuda").is_dir()


def cuda_python_missing_message(folder: Path = CUDA_PYTHON_DIR) -> str:
    return f"{CUDA_PYTHON} is not in {folder}: `{COMMAND}` fetches it from the package index"


def fetch_cuda_python(folder: Path = CUDA_PYTHON_DIR) -> bool:
    """Installs cuda-python 12.2.1 into `folder` (whole or not at all); False when it was there already."""
    if cuda_python_cached(folder):
        return False
    staging = folder.with_name(folder.name + ".partial")
    shutil.rmtree(staging, ignore_errors=True)
    proc = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--target", str(staging),
                           CUDA_PYTHON], capture_output=True, text=True)
    if proc.returncode:
        shutil.rmtree(staging, ignore_errors=True)
        raise SystemExit(f"cannot fetch {CUDA_PYTHON} from the package index: {proc.stderr.strip()[-500:]}")
    shutil.rmtree(folder, ignore_errors=True)
    os.replace(staging, folder)
    return True


GI_CHECK = "from gi.repository import GLib"


def ensure_gi() -> str:
    """A Python that imports GLib through PyGObject (this one or Debian's python3), installing Debian's
    python3-gi where there is none and this runs as root with apt-get; a line saying what happened."""
    for exe in (sys.executable, "/usr/bin/python3"):
        if Path(exe).exists() and subprocess.run([exe, "-c", GI_CHECK], capture_output=True).returncode == 0:
            return f"PyGObject (GLib.KeyFile): found for {exe}"
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        return "PyGObject (GLib.KeyFile): missing; install Debian's python3-gi (apt-get install python3-gi)"
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for cmd in (["apt-get", "update", "-qq"], ["apt-get", "install", "-y", "-qq", "--no-install-recommends",
                                                 "python3-gi"]):
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
        if proc.returncode != 0 and cmd[1] == "install":
            return f"PyGObject (GLib.KeyFile): apt-get install python3-gi failed: {proc.stderr.strip()[-300:]}"
    return "PyGObject (GLib.KeyFile): installed Debian's python3-gi for /usr/bin/python3"


def main() -> int:
    had_stubs = typecheck_trt.cached()
    stubs, repaired = typecheck_trt.fetch()
    print(f"{typecheck_trt.STUBS}: {'cached in' if had_stubs else 'fetched into'} {stubs}"
          + (f" ({repaired} invalid line(s) of the generated stubs repaired)" if repaired else ""))
    fetched = fetch_cuda_python()
    print(f"{CUDA_PYTHON}: {'fetched into' if fetched else 'cached in'} {CUDA_PYTHON_DIR}")
    print(ensure_gi())
    return 0


if __name__ == "__main__":
    sys.exit(main())
