"""JetPack 5.1's install, on a real CPython 3.8: pip takes the package as it is (no --ignore-requires-python),
wants none of the workstation's dependencies there, and the installed `mlit-edge predict` runs a model through
ONNX Runtime 1.19.2 (the newest for Python 3.8) with torch absent, as the workstation's Classifier predicts.

The venv is .cache/py38-venv, built by `python tools/fetch_test_deps.py` (part of the README's test command)
with deploy/install-jetson.sh's JetPack 5.1 pins read from the script; these tests download nothing. The
package is not in that venv: each test installs a fresh copy of the checkout (offline: --no-index, and
--no-build-isolation with the venv's setuptools where a device's pip fetches it), so what is tested is today's
code. Where the venv is missing the tests fail, naming the fetch command; only where this machine has no
Python 3.8 at all do they skip.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import textwrap
from pathlib import Path

import pytest

from tests.helpers import ROOT
from tools.fetch_test_deps import (ORT_PY38, find_python38, jetpack51_pins, py38_python,
                                   py38_venv_cached, py38_venv_missing_message)

PIP = ["-m", "pip"]
OFFLINE = ["--no-index", "--no-build-isolation"]
# offline and deaf to this machine's pip configuration (no config file, no PIP_* variable: its find-links,
# indexes and constraints): pip sees the venv and the copy of the checkout, nothing else
PIP_ENV = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PIP_CONFIG_FILE": os.devnull,
           "PIP_DISABLE_PIP_VERSION_CHECK": "1"}


@pytest.fixture(scope="module")
def py38() -> str:
    """The JetPack 5.1 venv's python (tools/fetch_test_deps.py)."""
    if find_python38() is None:
        pytest.skip("no Python 3.8 interpreter here (MLIT_PYTHON38=/path/to/python3.8 names one)")
    if not py38_venv_cached():
        pytest.fail(py38_venv_missing_message())
    return str(py38_python())


def project_copy(dest: Path) -> Path:
    """What pip reads of the checkout to build the package: pyproject.toml, the readme and the package (not its
    caches), copied so that a build leaves nothing in the checkout (setuptools writes an .egg-info beside it)."""
    dest.mkdir()
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy2(ROOT / name, dest / name)
    shutil.copytree(ROOT / "mlit_edge", dest / "mlit_edge", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    return dest


def would_install(proc: subprocess.CompletedProcess) -> list[str]:
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("Would install ")]
    assert len(lines) == 1, proc.stdout[-2000:] + proc.stderr[-2000:]
    return lines[0].split()[2:]


def test_pip_takes_the_package_on_python_38_without_ignoring_requires_python(py38, tmp_path):
    """The device's command, `pip install --no-deps SOURCE`, accepted as it is; and with its dependencies, pip
    is satisfied on 3.8 by what JetPack 5.1's install put there: nothing of the workstation's (torch, the ONNX
    tooling) is asked for."""
    src = project_copy(tmp_path / "src")
    proc = subprocess.run([py38, *PIP, "install", *OFFLINE, "--dry-run", "--no-deps", str(src)],
                          capture_output=True, text=True, env={**PIP_ENV, "HOME": str(tmp_path)}, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert would_install(proc) == ["mlit-edge-0.1.0"]
    proc = subprocess.run([py38, *PIP, "install", *OFFLINE, "--dry-run", str(src), *jetpack51_pins(), ORT_PY38],
                          capture_output=True, text=True, env={**PIP_ENV, "HOME": str(tmp_path)}, timeout=300)
    assert proc.returncode == 0, "on 3.8 the package asks for what a device does not have:\n" + proc.stderr[-2000:]
    assert would_install(proc) == ["mlit-edge-0.1.0"]


def export_fused(path: Path) -> Path:
    """tests.helpers.export_tiny's model and record, in the ONNX Runtime flavour's fused attention: opset 23's
    Attention, which ONNX Runtime runs from 1.23 on."""
    from mlit_edge.export import ORT_ATTENTION
    from mlit_edge.export.onnx_export import export_onnx
    from mlit_edge.export.source import load_for_export
    from tests.helpers import tiny_model

    _, info = load_for_export(None, "xxs", 10, random_weights=True)
    model = tiny_model(0)
    info["model"] = {**info["model"], "size": "tiny", "params": sum(p.numel() for p in model.parameters())}
    info["preprocess"] = {**info["preprocess"], "dataset": "mnist5k", "mean": [0.1307] * 3, "std": [0.3081] * 3}
    export_onnx(model, path, info, attention=ORT_ATTENTION)
    return path


@pytest.mark.slow
def test_mlit_edge_predict_on_python_38_with_onnxruntime_119_matches_the_workstation(py38, tmp_path):
    """The package installed for real (--no-deps, into a folder of its own) on Python 3.8: its runtime and CLI
    import with torch absent, `mlit-edge predict` gives the workstation Classifier's class and probability for
    an opset-18 graph, and refuses the opset-23 fused-attention graph in one line."""
    import numpy as np
    from PIL import Image

    from mlit_edge.runtime import Classifier
    from tests.helpers import export_tiny

    model = export_tiny(tmp_path / "tiny.onnx")  # the default opset, 18: ONNX Runtime 1.19 reads up to 21
    image = tmp_path / "image.png"
    Image.fromarray(np.random.default_rng(0).integers(0, 256, (40, 30, 3), dtype=np.uint8)).save(image)
    with Classifier.load(model) as clf:
        want = clf.predict([str(image)], top_k=3)[0]

    site = tmp_path / "site"
    proc = subprocess.run([py38, *PIP, "install", *OFFLINE, "--no-deps", "--target", str(site),
                           str(project_copy(tmp_path / "src"))], capture_output=True, text=True,
                          env={**PIP_ENV, "HOME": str(tmp_path)}, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(site), "OMP_NUM_THREADS": "1", "HOME": str(tmp_path)}

    probe = textwrap.dedent("""
        import importlib.util, json, sys
        import numpy, onnxruntime, mlit_edge, mlit_edge.cli, mlit_edge.runtime
        print(json.dumps({"python": list(sys.version_info[:2]), "numpy": numpy.__version__,
                          "onnxruntime": onnxruntime.__version__, "package": mlit_edge.__file__,
                          "torch": importlib.util.find_spec("torch") is not None,
                          "torch_imported": any(m.split(".")[0] == "torch" for m in sys.modules)}))
    """)
    proc = subprocess.run([py38, "-c", probe], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    seen = json.loads(proc.stdout)
    assert seen["python"] == [3, 8] and seen["onnxruntime"] == ORT_PY38.split("==")[1], seen
    assert seen["numpy"].startswith("1.23."), seen
    assert Path(seen["package"]).resolve().is_relative_to(site.resolve()), seen  # the installed copy, not ROOT
    assert not seen["torch"] and not seen["torch_imported"], seen

    mlit_edge_exe = site / "bin" / "mlit-edge"  # the console script pip wrote, as a device runs it
    proc = subprocess.run([str(mlit_edge_exe), "predict", str(image), "--model", str(model), "--top-k", "3", "--json"],
                          capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads(proc.stdout)[0]
    assert (got["class_id"], got["name"]) == (want.class_id, want.name), (got, want)
    assert got["prob"] == pytest.approx(want.prob, abs=1e-5), (got, want)
    assert [t[0] for t in got["top"]] == [t[0] for t in want.top], (got, want)

    fused = export_fused(tmp_path / "fused.onnx")
    proc = subprocess.run([str(mlit_edge_exe), "predict", str(image), "--model", str(fused)],
                          capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120)
    assert proc.returncode == 1 and proc.stdout == "", (proc.stdout, proc.stderr[-3000:])
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr[-3000:]
    assert "needs ONNX Runtime 1.23 or newer" in proc.stderr and "this is 1.19.2" in proc.stderr, proc.stderr
