"""What several test files share: the CLI run as a user runs it (in a subprocess, or in this process where a
process of its own proves nothing more), and tiny models.

Test modules import shared code from here (and get shared fixtures from conftest.py), never from
another test module."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).parent.parent
CLI = [sys.executable, "-m", "mlit_edge.cli"]
# one thread per subprocess: the suite runs two test workers on a 2-core machine
ENV = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
# the first lines of a script that must run without torch: any import of it fails
NO_TORCH = """
import sys
class NoTorch:
    def find_spec(self, name, path=None, target=None):
        if name == "torch" or name.startswith("torch."):
            raise ImportError("torch is blocked in this test")
sys.meta_path.insert(0, NoTorch())
"""
# the suite's trained checkpoint (conftest's `trained_checkpoint`): 6-px patches (36 tokens), where six epochs reach
# about 85% top-1 in a third of the time three epochs of 3-px patches took to reach 71%, and every test that runs
# the trained model runs a quarter of the tokens
SMALL = dict(img_size=36, patch_size=6, num_classes=10, dim=24, depth=3, heads=4, groups=2, hidden_first=16,
             hidden_last=8)
EPOCHS = 6
# `--set` options that make a 3-layer mLiT of width 12: every code path of the real sizes in seconds
TINY = ["--set", "dim=12", "--set", "heads=2", "--set", "groups=1", "--set", "depth=3", "--set", "hidden_first=8",
        "--set", "hidden_last=4"]


def cli(*args, check: bool = True, env: dict | None = None, **kw) -> subprocess.CompletedProcess:
    """`mlit-edge ARGS` in a subprocess (output captured); asserts a zero exit unless `check` is False."""
    proc = subprocess.run([*CLI, *map(str, args)], capture_output=True, text=True, env=env or ENV, **kw)
    if check:
        assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


def run_cli(*args, check: bool = True, env: dict | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess:
    """`mlit-edge ARGS` in this process (click's runner), as `cli` reports it: for tests of what a command
    writes, prints and exits with, where a process of its own (a torch import each) would prove nothing more.
    Signals, imports and installs stay with `cli`. An exception that escapes the command's one-line handling
    ends as in a process: its traceback on stderr, exit status 1. `env` adds variables for the call."""
    import contextlib
    import traceback

    from click.testing import CliRunner

    from mlit_edge.cli import main

    import torch  # conftest imported it already

    # commands set these process-wide (bench --threads, train --deterministic): the worker's next tests must not
    # inherit them
    state = torch.get_num_threads(), torch.are_deterministic_algorithms_enabled(), torch.backends.cudnn.benchmark
    try:
        with contextlib.chdir(cwd or Path.cwd()):
            r = CliRunner().invoke(main, [*map(str, args)], env=env)
    finally:
        torch.set_num_threads(state[0])
        torch.use_deterministic_algorithms(state[1])
        torch.backends.cudnn.benchmark = state[2]
    stderr = r.stderr
    if r.exception is not None and not isinstance(r.exception, SystemExit):
        stderr += "".join(traceback.format_exception(r.exception))
    proc = subprocess.CompletedProcess([*CLI, *map(str, args)], r.exit_code, r.stdout, stderr)
    if check:
        assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


def tiny_step_model():
    """Deterministic tiny classifier: no gate noise, no balancing loss, so DDP and one process must agree."""
    import torch

    from mlit_edge.model.config import MLiTConfig
    from mlit_edge.model.mlit import MLiT

    torch.manual_seed(0)
    return MLiT(MLiTConfig(img_size=36, num_classes=3, dim=12, depth=3, heads=2, groups=1, hidden_first=8,
                           hidden_last=4, noisy_gating=False, w_importance=0.0, w_load=0.0))


def synthetic_set(n: int = 16):
    """`n` random 36x36 images in 3 classes, as an ImageSet."""
    import torch

    from mlit_edge.train.data import ImageSet

    g = torch.Generator().manual_seed(1)
    return ImageSet("syn", torch.randint(0, 256, (n, 3, 36, 36), dtype=torch.uint8, generator=g),
                    torch.arange(n) % 3, ["a", "b", "c"], (0.5,) * 3, (0.25,) * 3, True)


def tiny_model(seed: int = 0):
    """A random 3-layer mLiT on 36x36 images in 10 classes (the shape the embedded digits export to)."""
    import torch

    from mlit_edge.model.config import MLiTConfig
    from mlit_edge.model.mlit import MLiT

    torch.manual_seed(seed)
    return MLiT(MLiTConfig(img_size=36, num_classes=10, dim=24, depth=3, heads=4, groups=2, hidden_first=16,
                           hidden_last=8)).eval()


def export_tiny(path: Path, seed: int = 0, convention: str = "normalised", probe: bool = False,
                input_dtype: str = "float32") -> Path:
    """`tiny_model(seed)` exported to `path` (fp32, dynamic batch) with a sidecar that records the embedded
    digits' preprocessing, as a user's artifact would; `convention="pixels"` as `--raw-input` makes it, and
    `input_dtype="uint8"` as `--input-dtype uint8` does."""
    from mlit_edge.export.onnx_export import export_onnx
    from mlit_edge.export.source import load_for_export

    _, info = load_for_export(None, "xxs", 10, random_weights=True)
    model = tiny_model(seed)
    info["model"] = {**info["model"], "size": "tiny", "params": sum(p.numel() for p in model.parameters())}
    info["preprocess"] = {**info["preprocess"], "dataset": "mnist5k", "mean": [0.1307] * 3, "std": [0.3081] * 3}
    export_onnx(model, path, info, convention=convention, probe=probe, input_dtype=input_dtype)
    return path


def resigned_copy(src: Path, dest: Path, **fields) -> Path:
    """A copy of the artifact `src` at `dest` whose sidecar also says `fields` (re-signed: it stays valid)."""
    import json
    import shutil

    from mlit_edge.artifacts.sidecar import write_sidecar

    dest.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(src, dest)
    write_sidecar(dest, {**json.loads(Path(f"{src}.json").read_text()), **fields})
    return dest


def refused_everywhere(art: Path, repo: Path, match: str) -> None:
    """`art` is refused in one line, matching `match`, by `Classifier.load`, `bench` and `export-triton`
    (into the folder `repo`): what a sidecar that contradicts its graph must get from each."""
    import pytest

    from mlit_edge.runtime import Classifier
    from mlit_edge.artifacts.schema import SidecarError

    from click.testing import CliRunner

    from mlit_edge.cli import main

    with pytest.raises(SidecarError, match=match):
        Classifier.load(art)
    # the two commands in-process (click's runner): their checks and one-line errors are the CLI's own, and a
    # subprocess each would prove nothing more; an escaped exception would be `r.exception`, not SystemExit
    r = CliRunner().invoke(main, ["bench", str(art), "--iterations", "2", "--batch", "1", "--limit", "8"])
    assert r.exit_code == 1 and isinstance(r.exception, SystemExit) and "does not belong to this graph" in r.stderr
    r = CliRunner().invoke(main, ["export-triton", str(art), "--repo", str(repo)])
    assert r.exit_code != 0 and isinstance(r.exception, SystemExit) and "does not belong to this graph" in r.stderr


def fake_plan(folder: Path, io, name: str = "fake") -> Path:
    """A .plan whose bytes are no engine, with a sidecar recording `io` as engine.io (export-triton reads the
    sidecar, never the engine): TensorRT is not needed to try what a sidecar can say."""
    from mlit_edge.artifacts.sidecar import write_sidecar

    path = folder / f"{name}.plan"
    path.write_bytes(b"not an engine")
    write_sidecar(path, {"precision": "fp16", "classes": [str(i) for i in range(10)],
                         "preprocess": {"size": 36, "mean": [0.5] * 3, "std": [0.5] * 3, "dataset": "mnist5k"},
                         "engine": {"flags": {"profile": {"max": 16}}, "io": io}})
    return path


GLIB_DUMP = r"""
import json, sys
from gi.repository import GLib
kf = GLib.KeyFile()
kf.set_list_separator(ord(";"))
kf.load_from_file(sys.argv[1], GLib.KeyFileFlags.NONE)
out = {}
for group in kf.get_groups()[0]:
    out[group] = {}
    for key in kf.get_keys(group)[0]:
        entry = {"value": kf.get_value(group, key)}
        for kind, get in (("int", kf.get_integer), ("double", kf.get_double), ("ints", kf.get_integer_list),
                          ("doubles", kf.get_double_list)):
            try:
                entry[kind] = get(group, key)
            except GLib.Error:
                pass
        out[group][key] = entry
print(json.dumps(out))
"""


def python_with_gi() -> str:
    """An interpreter that imports PyGObject's GLib: this one, else Debian's python3 (python3-gi, which
    tools/fetch_test_deps.py installs where it is missing); AssertionError with the fix otherwise."""
    for exe in (sys.executable, "/usr/bin/python3"):
        if Path(exe).exists() and subprocess.run([exe, "-c", "from gi.repository import GLib"],
                                                 capture_output=True).returncode == 0:
            return exe
    raise AssertionError("no Python here imports GLib through PyGObject: apt-get install python3-gi "
                         "(python tools/fetch_test_deps.py does it as root), or pip install PyGObject")


def glib_keyfile(path: Path) -> dict:
    """`path` parsed by GLib's own key-file parser, as DeepStream reads its configs: {group: {key: {"value":
    the raw string, and "int", "double", "ints", "doubles" where GLib reads the value as one}}}."""
    import json

    proc = subprocess.run([python_with_gi(), "-c", GLIB_DUMP, str(path)], capture_output=True, text=True)
    assert proc.returncode == 0, f"GLib.KeyFile refused {path}: {proc.stderr[-2000:]}"
    return json.loads(proc.stdout)


def load_file(path: Path, name: str | None = None):
    """The Python file `path` (a script in benchmarks/, deploy/ or tools/, or a generated module) as a module,
    without it being importable by name."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(name or Path(path).stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def model_config_pb2():
    """Triton's ModelConfig message, from tritonclient's generated module (not through the code under test, and
    without tritonclient's gRPC client)."""
    import tritonclient

    return load_file(Path(tritonclient.__file__).parent / "grpc" / "model_config_pb2.py")


# a sitecustomize.py that SIGKILLs the process at the os.replace onto a name ending in {suffix}: a kill between the
# renames of a pair (tests/test_hostile.py, tests/test_hostile_r4_weights.py)
KILL_AT = """
import os, signal
_replace = os.replace
def _replace_or_die(src, dst, *a, **kw):
    if str(dst).endswith({suffix!r}):
        os.kill(os.getpid(), signal.SIGKILL)
    return _replace(src, dst, *a, **kw)
os.replace = _replace_or_die
"""
