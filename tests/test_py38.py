"""The device side runs on Python 3.8 (JetPack 5.1 is Ubuntu 20.04): every module a Jetson imports is
checked here for what Python 3.9+ added.

The package's requires-python is >=3.8 and its dependencies carry markers (the workstation's, torch and the ONNX
tooling, from 3.10 on), so JetPack 5.1's pip installs it as it is: tests/test_py38_install.py has a real 3.8's pip
install it and runs `mlit-edge predict` there. The modules checked are found, not listed: the device's entry
points are imported with torch and the ONNX tooling blocked, and whatever `mlit_edge` module that loads is
checked, with the whole torch-free floor (tests/test_layout.py FLOOR: base, artifacts, devices, runtime, stacks), the CLI modules the device runs and engine/trt_sources.py. A module
added to the device path is checked without editing this file.

Three checks:
  1. vermin (the dev extra) with --target=3.8-: stdlib names, keyword arguments, syntax and, where a
     module's annotations are evaluated, builtin generics and `X | Y` unions in them;
  2. `newer_than_38` below: what vermin cannot see without knowing types: `name.removesuffix(...)` on a
     variable (vermin flags it only on a literal), `Path.is_relative_to`, and `list[int]` or `int | None`
     evaluated at run time outside an annotation (a type alias, a class-body annotation that
     `typing.get_type_hints` reads);
  3. a real CPython 3.8 (MLIT_PYTHON38=/path/to/python3.8, `python3.8` on PATH, or pyenv's; CI's machine image
     has pyenv's 3.8.18) compiles every checked module, and the venv `python tools/fetch_test_deps.py` builds
     with JetPack 5.1's numpy, Pillow and click (.cache/py38-venv) imports the device's entry points with torch
     and the ONNX tooling blocked. Only 1 and 2 run where there is no Python 3.8 at all (the third skips, saying
     so); where there is one and the venv is missing, the third fails, naming the fetch command. 1 and 2 name the
     file, line and feature of every break; an import on 3.8 stops at the first.
"""
from __future__ import annotations

import ast
import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import NO_TORCH, ROOT
from tests.layout_rules import FLOOR
from tools.fetch_test_deps import find_python38, py38_python, py38_venv_cached, py38_venv_missing_message

PACKAGE = ROOT / "mlit_edge"
# What a Jetson runs: `mlit-edge build --onnx ...`, predict, serve, stream and bench (deploy/README.md), with
# neither torch nor the onnx tooling installed (ONNX Runtime is optional there: WITH_ORT=1)
DEVICE_IMPORTS = NO_TORCH + """
class NoOnnx:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("onnx", "onnxscript", "onnxconverter_common", "onnxruntime", "torchvision"):
            raise ImportError(name + " is blocked: a device does not have it")
sys.meta_path.insert(0, NoOnnx())
from mlit_edge.engine.build import run_build  # the build --onnx path
import mlit_edge.cli
import mlit_edge.runtime
import mlit_edge.bench.options, mlit_edge.bench.report, mlit_edge.bench.suite  # what `mlit-edge bench` imports
print("\\n".join(sorted(m.__file__ for name, m in sys.modules.items() if name.startswith("mlit_edge"))))
"""
# the CLI modules the device runs, named here as well in case an import of them turns lazy
DEVICE_FILES = ["cli/__init__.py", "cli/__main__.py", "cli/common.py", "cli/deploy.py", "cli/inference.py",
                "engine/trt_sources.py"]

VERMIN = [sys.executable, "-c", "import sys, vermin; sys.exit(vermin.main())", "--no-config-file", "--processes=1",
          "--target=3.8-", "--no-tips", "--violations", "--quiet", "--format", "parsable"]
# 3.9+ methods vermin can only tell on a literal receiver (it does not infer that `name` is a str)
METHODS = {"removeprefix": "3.9", "removesuffix": "3.9", "is_relative_to": "3.9", "with_stem": "3.9",
           "randbytes": "3.9", "bit_count": "3.10"}
BUILTIN_GENERICS = {"list", "dict", "tuple", "set", "frozenset", "type"}
TYPE_NAMES = BUILTIN_GENERICS | {"int", "float", "complex", "str", "bytes", "bytearray", "bool", "object"}


def device_modules() -> list[Path]:
    """Every mlit_edge file a device imports (see the module docstring), sorted."""
    proc = subprocess.run([sys.executable, "-c", DEVICE_IMPORTS], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, cwd=ROOT)
    assert proc.returncode == 0, f"the device's imports fail without torch and onnx: {proc.stderr[-2000:]}"
    found = {Path(line) for line in proc.stdout.splitlines() if line.strip()}
    found |= {p for room in FLOOR for p in (PACKAGE / room).rglob("*.py")} | {PACKAGE / f for f in DEVICE_FILES}
    return sorted(p.resolve() for p in found)


def evaluates_annotations(tree: ast.Module) -> bool:
    """Whether a module's annotations run when it is imported: they do without `from __future__ import
    annotations`; with it they stay strings unless something evaluates them (`get_type_hints`)."""
    return not any(isinstance(n, ast.ImportFrom) and n.module == "__future__" and
                   any(a.name == "annotations" for a in n.names) for n in tree.body)


def vermin(paths: list[Path]) -> list[str]:
    """vermin's violations of --target=3.8- as 'file:line: feature (Python X)'.

    --eval-annotations only for modules without `from __future__ import annotations`: theirs are evaluated
    at definition time, so `dict[str, X]` or `int | None` there fails on 3.8 at import (and --feature
    union-types finds the unions). Where the future import stands, annotations are strings and
    `str | None` is fine on 3.8; --eval-annotations there would flag every such annotation. The one thing
    that evaluates them anyway, `typing.get_type_hints` on a dataclass (model/config.py), is what
    `newer_than_38` checks."""
    evaluated = [p for p in paths if evaluates_annotations(ast.parse(p.read_text()))]
    lazy = [p for p in paths if p not in evaluated]
    out = []
    for group, extra in ((lazy, []), (evaluated, ["--eval-annotations", "--feature", "union-types"])):
        if not group:
            continue
        proc = subprocess.run([*VERMIN, *extra, *map(str, group)], capture_output=True, text=True)
        assert proc.returncode in (0, 1) and "Traceback" not in proc.stderr, proc.stderr[-2000:]
        for line in proc.stdout.splitlines():  # file:line:col:py2:py3:feature; a summary line has no line number
            parts = line.split(":", 5)
            if len(parts) == 6 and parts[1]:
                out.append(f"{parts[0]}:{parts[1]}: {parts[5]} (Python {parts[4]})")
    return out


def newer_than_38(path: Path) -> list[str]:
    """What vermin misses, as 'file:line: feature (Python X)': a 3.9+ method on any receiver, and a builtin
    generic or an `X | Y` union evaluated at run time: outside annotations, and inside those Python
    evaluates (every annotation of a module without the future import; class-body ones where the module
    calls `typing.get_type_hints`)."""
    source = path.read_text()
    tree = ast.parse(source)
    unevaluated: set[int] = set()
    if not evaluates_annotations(tree):
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                a = node.args
                args = [*a.posonlyargs, *a.args, *a.kwonlyargs, *filter(None, (a.vararg, a.kwarg))]
                annotations = [x.annotation for x in args] + [node.returns]
            else:
                annotations = [node.annotation] if isinstance(node, ast.AnnAssign) else []
            unevaluated |= {id(n) for ann in annotations if ann is not None for n in ast.walk(ann)}
        if "get_type_hints" in source:  # reads the class-body annotations of the module's classes
            for cls in (n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)):
                for st in (s for s in cls.body if isinstance(s, ast.AnnAssign)):
                    unevaluated -= {id(n) for n in ast.walk(st.annotation)}

    def type_like(n: ast.AST) -> bool:
        return ((isinstance(n, ast.Constant) and n.value is None) or isinstance(n, ast.Subscript)
                or (isinstance(n, ast.Name) and (n.id in TYPE_NAMES or (n.id[:1].isupper() and not n.id.isupper())))
                or (isinstance(n, ast.BinOp) and isinstance(n.op, ast.BitOr) and type_like(n.left)
                    and type_like(n.right)))

    found = []
    for node in ast.walk(tree):
        if id(node) in unevaluated:
            continue
        if isinstance(node, ast.Attribute) and node.attr in METHODS:
            found.append((node.lineno, f"'.{node.attr}()' member", METHODS[node.attr]))
        elif isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name) and node.value.id in BUILTIN_GENERICS:
            found.append((node.lineno, f"builtin generic {node.value.id}[..] evaluated at run time", "3.9"))
        elif (isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr) and type_like(node)
              and not (isinstance(node.left, ast.BinOp) and isinstance(node.left.op, ast.BitOr))):
            found.append((node.lineno, "union type `X | Y` evaluated at run time", "3.10"))
    return [f"{path}:{line}: {what} (Python {version})" for line, what, version in sorted(found)]


def violations(paths: list[Path]) -> list[str]:
    return vermin(paths) + [v for p in paths for v in newer_than_38(p)]


@pytest.fixture(scope="module")
def modules() -> list[Path]:
    return device_modules()


needs_vermin = pytest.mark.skipif(importlib.util.find_spec("vermin") is None,
                                  reason="vermin is not installed (the dev extra: pip install vermin)")


def test_the_device_path_is_found_by_importing_it(modules):
    rel = {p.relative_to(PACKAGE.resolve()).as_posix() for p in modules}
    # what the build --onnx path imports (found, not listed: these are only a floor)
    assert {"engine/build.py", "engine/plan.py", "export/resolve.py", "export/pipeline.py", "export/flavours.py",
            "devices/trt_env.py", "model/config.py", "base/compat.py", "bench/suite.py"} <= rel
    assert {p.resolve() for room in FLOOR for p in (PACKAGE / room).rglob("*.py")} <= set(modules)
    # train/'s one torch-free module: what a training run is asked (RunConfig), whose defaults the CLI's options show
    torch_free = {"train/__init__.py", "train/run_config.py"}
    assert not any(name.startswith(("train/", "model/mlit", "export/onnx_export", "export/precision"))
                   and name not in torch_free for name in rel), "a torch module is on the device path"


@needs_vermin
def test_every_device_module_runs_on_python_38(modules):
    found = violations(modules)
    assert not found, "Python 3.9+ on the device path (JetPack 5.1 runs 3.8):\n" + "\n".join(found)


@needs_vermin
def test_the_check_names_file_line_and_feature_of_a_38_break(tmp_path):
    """A temporary module with str.removesuffix, on a literal (vermin flags it) and on a variable (vermin
    cannot tell a str: `newer_than_38` flags it), a runtime builtin generic, and an evaluated union."""
    bad = tmp_path / "bad.py"
    bad.write_text("from __future__ import annotations\n"
                   "from typing import Callable\n"
                   "STEM = 'mlit-xxs.onnx'.removesuffix('.onnx')\n"
                   "def stem(name: str) -> str | None:\n"
                   "    return name.removesuffix('.onnx')\n"
                   "Opener = Callable[[str], tuple[int, dict]]\n")
    assert any(v.startswith(f"{bad}:3: 'str.removesuffix' member") and "3.9" in v for v in vermin([bad])), vermin([bad])
    found = violations([bad])
    assert any(v.startswith(f"{bad}:5: '.removesuffix()' member") for v in found), found
    assert any(v.startswith(f"{bad}:6: builtin generic tuple[..]") for v in found), found
    assert not any(f"{bad}:4:" in v for v in found), "an annotation under the future import is never evaluated"
    eager = tmp_path / "eager.py"  # no future import: annotations run at import
    eager.write_text("from dataclasses import dataclass\n@dataclass\nclass A:\n    opset: int | None\n")
    assert any(v.startswith(f"{eager}:4:") and "3.10" in v for v in vermin([eager])), vermin([eager])
    good = tmp_path / "good.py"
    good.write_text("from __future__ import annotations\ndef f(x: list[int] | None) -> dict[str, int]:\n"
                    "    return {}\n")
    assert violations([good]) == []


def python38() -> str | None:
    """A Python 3.8 interpreter that runs, if this machine has one (a pyenv shim on PATH may not)."""
    return find_python38()


@pytest.mark.skipif(python38() is None, reason="no Python 3.8 interpreter here (MLIT_PYTHON38=... names one)")
def test_a_real_python_38_compiles_and_imports_the_device_path(modules):
    exe = python38()
    code = "import ast, sys\nfor p in sys.argv[1:]:\n    ast.parse(open(p).read(), p)\n"
    proc = subprocess.run([exe, "-c", code, *map(str, modules)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-2000:]
    if not py38_venv_cached():  # JetPack 5.1's numpy, Pillow and click (and ONNX Runtime 1.19.2, blocked here)
        pytest.fail(f"{exe} compiles every device module; to import them, " + py38_venv_missing_message())
    proc = subprocess.run([str(py38_python()), "-c", DEVICE_IMPORTS], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-2000:]
    imported = {Path(line).resolve() for line in proc.stdout.splitlines() if line.strip()}
    assert {PACKAGE.resolve() / "runtime" / "__init__.py", PACKAGE.resolve() / "cli" / "__init__.py"} <= imported
