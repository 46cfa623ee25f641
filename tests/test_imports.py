"""Imports stand at a module's top; an import inside a function is kept for what a module must not load when it
is imported (`mlit_edge/base/compat.py` states the rule and holds `HEAVY`).

An import inside a function is allowed when what it imports is
  - a `HEAVY` dependency (torch, the ONNX tooling, TensorRT, ...),
  - a package module that imports one at its top, directly or through other modules (it carries it in), or
  - a package module that an entry point does not load, imported from a module it does: `mlit-edge` defers a
    command's stage so that `--help` and every other command start without it, and a device's build, runtime
    and bench defer what would add a module to the device's set (tests/test_py38.py).
Everything else (the standard library, numpy, click, a torch-free package module start-up loads anyway) is
imported at the top. Read from the source, so the check needs neither torch nor the ONNX tooling."""
from __future__ import annotations

import ast
from pathlib import Path

from mlit_edge.base.compat import heavy

PACKAGE = Path(__file__).parent.parent / "mlit_edge"
# What `mlit-edge` imports to start, and what a device imports (tests/test_py38.py, DEVICE_IMPORTS)
ENTRIES = {"mlit-edge": ("mlit_edge.cli",),
           "a device": ("mlit_edge.cli", "mlit_edge.engine.build", "mlit_edge.runtime", "mlit_edge.bench.options",
                        "mlit_edge.bench.report", "mlit_edge.bench.suite")}


def module_names(package: Path) -> dict[str, Path]:
    """Dotted name -> file, for every module of the package rooted at `package`."""
    out = {}
    for path in package.rglob("*.py"):
        parts = path.relative_to(package.parent).with_suffix("").parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def _type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or \
        (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _targets(node: ast.Import | ast.ImportFrom, name: str, is_package: bool, known: set[str]) -> list[str]:
    """The absolute module names an import statement loads (relative imports resolved; `from . import x`
    names the submodule x where there is one)."""
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    here = name.split(".") if is_package else name.split(".")[:-1]
    base = here[:len(here) - node.level + 1] if node.level else []
    target = ".".join(base + ([node.module] if node.module else []))
    submodules = [f"{target}.{a.name}" for a in node.names if f"{target}.{a.name}" in known]
    return submodules if len(submodules) == len(node.names) else [target] + submodules


def imports(name: str, path: Path, known: set[str]) -> tuple[set[str], list[tuple[int, str]]]:
    """What module `name` imports when it is imported (its top, `if`/`try` blocks included, TYPE_CHECKING
    blocks left out), and (line, module) for each import inside a function or method."""
    top: set[str] = set()
    inner: list[tuple[int, str]] = []
    is_package = path.name == "__init__.py"

    def walk(node: ast.AST, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _type_checking(child):
                for other in child.orelse:  # the `else:` of `if TYPE_CHECKING` runs
                    walk(ast.Module(body=[other], type_ignores=[]), in_function)
                continue
            if isinstance(child, (ast.Import, ast.ImportFrom)):
                if isinstance(child, ast.ImportFrom) and child.module == "__future__":
                    continue
                for target in _targets(child, name, is_package, known):
                    if in_function:
                        inner.append((child.lineno, target))
                    else:
                        top.add(target)
            walk(child, in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)))

    walk(ast.parse(path.read_text()), False)
    return top, inner


def _with_parents(module: str) -> list[str]:
    """`a.b.c` runs a, a.b and a.b.c."""
    parts = module.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts) + 1)]


def closure(start: str, top: dict[str, set[str]]) -> set[str]:
    """Every module (the package's and others) importing `start` loads, by the top-level imports alone."""
    seen: set[str] = set()
    todo = _with_parents(start)
    while todo:
        module = todo.pop()
        if module in seen:
            continue
        seen.add(module)
        for target in top.get(module, ()):
            todo.extend(_with_parents(target))
    return seen


def misplaced(package: Path = PACKAGE, entries: dict[str, tuple[str, ...]] = ENTRIES) -> list[str]:
    """'file:line: import X' for each import inside a function that the rule (module docstring) puts at the top."""
    files = module_names(package)
    known = set(files)
    parsed = {name: imports(name, path, known) for name, path in files.items()}
    top = {name: found[0] for name, found in parsed.items()}
    reach = {name: closure(name, top) for name in files}
    loaded = [set().union(*(reach[m] for m in group if m in files)) for group in entries.values()]
    out = []
    for name, (_, inner) in sorted(parsed.items()):
        for line, target in inner:
            if heavy(target):
                continue
            if target in known and any(heavy(m) for m in reach[target]):
                continue  # a package module that imports a heavy dependency at its top
            if target in known and any(name in entry and target not in entry for entry in loaded):
                continue  # deferred: `mlit-edge` (or a device) loads this module, and that one only if it runs it
            out.append(f"{files[name].relative_to(package.parent)}:{line}: import {target}")
    return out


def test_imports_inside_functions_are_only_the_heavy_and_the_deferred():
    found = misplaced()
    assert not found, ("imports inside functions that belong at the module's top (mlit_edge/base/compat.py says "
                       "which may stay): " + "; ".join(found))


def test_the_import_check_bites(tmp_path):
    """A function's import of the standard library, or of a light package module start-up loads anyway, is
    named; one of a heavy dependency, of a module that imports one at its top, or a command's deferred stage
    is not."""
    pkg = tmp_path / "mlit_edge"
    (pkg / "cli").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "cli" / "__init__.py").write_text("from . import command\n")
    (pkg / "cli" / "command.py").write_text(
        "from .. import light\n"
        "def run():\n"
        "    from ..stage import go  # deferred: start-up does not load it\n"
        "    from .. import light  # start-up loads it already\n"
        "    return go()\n")
    (pkg / "light.py").write_text("def f():\n    import json\n    import torch\n    from . import model\n"
                                  "    from .stage import go\n")
    (pkg / "model.py").write_text("import numpy\nimport torch.nn\n")
    (pkg / "stage.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import onnx\n"
                                  "def go():\n    if TYPE_CHECKING:\n        from .light import f\n"
                                  "    import onnx\n    from . import heavy_user\n    from . import light\n")
    (pkg / "heavy_user.py").write_text("from .model import numpy\n")
    found = misplaced(pkg)
    assert found == ["mlit_edge/cli/command.py:4: import mlit_edge.light",
                     "mlit_edge/light.py:2: import json",
                     "mlit_edge/stage.py:9: import mlit_edge.light"], found
    (pkg / "model.py").write_text("import numpy\n")  # torch-free now: a function has no reason to defer it
    assert "mlit_edge/stage.py:8: import mlit_edge.heavy_user" in misplaced(pkg)
