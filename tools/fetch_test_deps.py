"""Fetch what the tests read but `pip install -e '.[dev]'` cannot install, into `.cache/` in the checkout.

    python tools/fetch_test_deps.py    # part of the README's test command; does nothing for what is cached

Three things from the package index, all kept out of the environment:
- TensorRT 10.13's type stubs (`tensorrt-stubs`), unpacked and repaired by tools/typecheck_trt.py, which
  tests/engine/test_api.py runs mypy with (the wheel depends on TensorRT itself, and installed it would
  shadow `tensorrt` with an empty package);
- cuda-python 12.2.1, JetPack 6.0's version, installed with `--no-deps --target` into a folder of its own,
  where tests/engine/test_api.py looks up the `cuda.cudart` names the runner uses (the environment has a
  newer cuda-python, whose path is `cuda.bindings.runtime`);
- a Python 3.8 venv in .cache/py38-venv with the device's dependencies as deploy/install-jetson.sh installs them
  on JetPack 5.1 (its numpy, Pillow and click pins; onnxruntime 1.19.2, the newest for Python 3.8, as WITH_ORT=1
  gets there), where tests/test_py38_install.py has pip install the checkout without --ignore-requires-python
  and runs `mlit-edge predict` through ONNX Runtime 1.19.2. It needs a Python 3.8 interpreter (MLIT_PYTHON38,
  `python3.8` on PATH, or pyenv's); without one the step is skipped, saying so, and so are those tests. The
  checkout itself is not installed there (it would be a snapshot): the tests install a fresh copy.

And one from Debian's packages, where none is installed: `python3-gi` (PyGObject), whose GLib.KeyFile parses
the DeepStream configs in tests/runtime/test_deepstream.py as DeepStream itself reads them (installed as
root with apt-get; elsewhere the line printed says what to install).

The tests download nothing: when something is missing they fail, naming this command.
"""
from __future__ import annotations

import glob
import json
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


# ------------------------------------------------------------------ JetPack 5.1's Python 3.8, with its pins

PY38_VENV = ROOT / ".cache" / "py38-venv"
PY38_DONE = PY38_VENV / "mlit-edge-fetched.json"  # written last: a venv without it is rebuilt from scratch
JETPACKS_JSON = ROOT / "mlit_edge" / "devices" / "jetpacks.json"  # the device table install-jetson.sh reads
# what WITH_ORT=1 gets on JetPack 5.1's Python 3.8: the last ONNX Runtime with a cp38 wheel (the table's row)
JETPACK51 = json.loads(JETPACKS_JSON.read_text())["jetpacks"]["5.1"]  # read once: the pins and the wheel below
ORT_PY38 = f"onnxruntime=={JETPACK51['onnxruntime']}"
# not the device's: the tests have pip build the checkout's metadata offline (--no-build-isolation), where a
# device's pip fetches the build backend (pyproject.toml's build-system) itself
BUILD_BACKEND = "setuptools>=68"


def find_python38() -> str | None:
    """A Python 3.8 interpreter that runs (a pyenv shim on PATH may not): MLIT_PYTHON38, `python3.8` on PATH, or
    pyenv's 3.8.x; None where there is none."""
    candidates = [os.environ.get("MLIT_PYTHON38"), shutil.which("python3.8"),
                  *sorted(glob.glob(os.path.expanduser("~/.pyenv/versions/3.8*/bin/python3.8")))]
    for exe in filter(None, candidates):
        try:
            proc = subprocess.run([exe, "-c", "import sys; print(sys.version_info[:2] == (3, 8))"],
                                  capture_output=True, text=True, timeout=60)
        except OSError:
            continue
        if proc.returncode == 0 and proc.stdout.strip() == "True":
            return exe
    return None


def jetpack51_pins() -> list[str]:
    """The numpy, Pillow and click requirements deploy/install-jetson.sh installs on JetPack 5.1, read from the
    device table the script reads (mlit_edge/devices/jetpacks.json), so that the venv follows it."""
    pins = JETPACK51["pins"]
    return [pins["numpy"], pins["pillow"], pins["click"]]


def py38_requirements() -> list[str]:
    return [*jetpack51_pins(), ORT_PY38, BUILD_BACKEND]


def py38_python(venv: Path = PY38_VENV) -> Path:
    return venv / "bin" / "python"


def py38_venv_cached(venv: Path = PY38_VENV) -> bool:
    """The venv is whole (its record written last), made for today's requirements, and its python runs."""
    try:
        done = json.loads((venv / PY38_DONE.name).read_text())
    except (OSError, ValueError):
        return False
    if done.get("requirements") != py38_requirements():
        return False
    proc = subprocess.run([str(py38_python(venv)), "-c", "import sys; print(sys.version_info[:2] == (3, 8))"],
                          capture_output=True, text=True)
    return proc.returncode == 0 and proc.stdout.strip() == "True"


def py38_venv_missing_message(venv: Path = PY38_VENV) -> str:
    return (f"the Python 3.8 venv with JetPack 5.1's device dependencies ({', '.join(py38_requirements())}) "
            f"is missing from {venv} or out of date: `{COMMAND}` builds it from the package index")


def fetch_py38_venv(venv: Path = PY38_VENV) -> str:
    """Builds the JetPack 5.1 venv (whole or not at all: the record that says it is whole is written last, and
    a venv without it is removed first); a line saying what happened."""
    if py38_venv_cached(venv):
        return f"Python 3.8 venv (JetPack 5.1's pins, {ORT_PY38}): cached in {venv}"
    exe = find_python38()
    if exe is None:
        return ("Python 3.8 venv (JetPack 5.1's pins): skipped, no Python 3.8 interpreter here (MLIT_PYTHON38=... "
                "names one); tests/test_py38_install.py skips")
    requirements = py38_requirements()
    shutil.rmtree(venv, ignore_errors=True)
    python = str(py38_python(venv))
    # as deploy/install-jetson.sh does on the device: a venv, pip upgraded, then the pins (ORT as WITH_ORT=1)
    for cmd in ([exe, "-m", "venv", str(venv)],
                [python, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--upgrade", "pip"],
                [python, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", *requirements]):
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode:
            shutil.rmtree(venv, ignore_errors=True)
            raise SystemExit(f"cannot build the Python 3.8 venv in {venv}: {' '.join(cmd)}: "
                             f"{proc.stderr.strip()[-500:]}")
    freeze = subprocess.run([python, "-m", "pip", "freeze", "--all", "--disable-pip-version-check"],
                            capture_output=True, text=True, check=True).stdout.split()
    done = venv / PY38_DONE.name
    tmp = done.with_name(done.name + ".partial")
    tmp.write_text(json.dumps({"python": exe, "requirements": requirements, "installed": freeze}, indent=1) + "\n")
    os.replace(tmp, done)
    return f"Python 3.8 venv (JetPack 5.1's pins, {ORT_PY38}): built in {venv} with {exe}"


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
    print(fetch_py38_venv())
    return 0


if __name__ == "__main__":
    sys.exit(main())
