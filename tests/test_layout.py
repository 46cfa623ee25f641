"""The package's shape: rooms named for what they hold, each importing only the rooms its line allows
(tests/layout_rules.py ALLOWED),
no import cycles, no private name imported across modules, no module longer than one sitting, one place for
each shared constant.

Imports are read wherever they stand (module level and inside functions), and so are module paths
named in strings ("mlit_edge.x.y" or "mlit_edge.x.y:function"), since an import inside a function or a
module loaded by name ties the files together as surely as one at the top."""
import ast
import re
from pathlib import Path

import pytest

from tests.layout_rules import (ALLOWED, MAX_LINES, PACKAGE, TOP, arrows, cycle_in, graph, imported, modules,
                                 stage)


def test_folders_are_the_rooms():
    folders = {p.name for p in PACKAGE.iterdir() if p.is_dir() and (p / "__init__.py").is_file()}
    assert folders == set(ALLOWED) | {"cli"}


def test_the_allowed_arrows_run_one_way():
    """No room may import a room that may import it: the rooms stack, so the floor never reaches up."""
    for room, below in ALLOWED.items():
        for other in below:
            assert room not in ALLOWED[other], f"{room} and {other} may import each other"


@pytest.mark.parametrize("name", sorted(modules()))
def test_rooms_import_only_the_rooms_their_line_allows(name):
    own = stage(name)
    if own in TOP:
        return
    for target, how in imported(name, modules()[name], set(modules())).items():
        other = stage(target)
        if other == own or target == "mlit_edge":  # its own room; the version string
            continue
        assert other not in TOP, f"{name} names {target} from the top ({how})"
        assert other in ALLOWED[own], f"{name} ({own}) names {target} ({other}), which {own} may not import ({how})"


def test_the_room_check_bites(tmp_path):
    """A floor room reaching up to a stage is refused: build one such arrow and look."""
    pkg = tmp_path / "mlit_edge"
    for room in ("artifacts", "export"):
        (pkg / room).mkdir(parents=True)
        (pkg / room / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "export" / "a.py").write_text("from ..artifacts import b\n")
    (pkg / "artifacts" / "b.py").write_text("def f():\n    from ..export.a import g\n")
    found = arrows(pkg)
    assert ("artifacts", "export") in found and "export" not in ALLOWED["artifacts"]
    assert ("export", "artifacts") in found and "artifacts" in ALLOWED["export"]


def test_every_imported_or_named_module_exists():
    known = set(modules())
    missing = [f"{name} -> {target}" for name, targets in graph().items() for target in targets
               if target not in known and target.rsplit(".", 1)[0] not in known]
    assert not missing, f"imports of modules that do not exist: {missing}"


def test_no_import_cycles_at_any_depth():
    cycle = cycle_in()
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_the_cycle_check_sees_imports_inside_functions_and_names_in_strings(tmp_path):
    """The check above must fail on a cycle that only an import inside a function closes, or only a
    module named in a string: build such packages and look."""
    pkg = tmp_path / "mlit_edge"
    (pkg / "a").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "a" / "__init__.py").write_text("")
    (pkg / "a" / "one.py").write_text("from . import two\n")
    (pkg / "a" / "two.py").write_text("def f():\n    from .one import g\n")
    assert cycle_in(pkg) is not None
    (pkg / "a" / "two.py").write_text('OPENER = "mlit_edge.a.one:g"\n')
    assert cycle_in(pkg) is not None
    (pkg / "a" / "two.py").write_text("def f():\n    return 1\n")
    assert cycle_in(pkg) is None


def private_imports(package: Path = PACKAGE) -> list[str]:
    """'module:line: from X import _name' for each import of another module's underscore-private name (a
    dunder such as `__version__` is public). A name shared across modules is public, or lives where it is used."""
    def private(n: str) -> bool:
        return n.startswith("_") and not (n.startswith("__") and n.endswith("__"))

    found = []
    for name, path in sorted(modules(package).items()):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.level or (node.module or "").startswith("mlit_edge")):
                source = "." * node.level + (node.module or "")
                found += [f"{name}:{node.lineno}: from {source} import {a.name}" for a in node.names if private(a.name)]
            elif isinstance(node, ast.Import):  # import mlit_edge.x._y
                found += [f"{name}:{node.lineno}: import {a.name}" for a in node.names
                          if a.name.startswith("mlit_edge.") and any(map(private, a.name.split(".")))]
    return found


def test_no_module_imports_another_modules_private_names():
    found = private_imports()
    assert not found, "private names imported across modules (make them public, or move them):\n" + "\n".join(found)


def test_the_private_import_check_sees_relative_absolute_and_nested_imports(tmp_path):
    pkg = tmp_path / "mlit_edge"
    (pkg / "a").mkdir(parents=True)
    (pkg / "__init__.py").write_text("__version__ = '1'\n")
    (pkg / "a" / "__init__.py").write_text("")
    (pkg / "a" / "one.py").write_text("from .. import __version__\nfrom .two import f as _f\n_g = 1\n")
    (pkg / "a" / "two.py").write_text("def f():\n    return 1\n")
    assert private_imports(pkg) == []  # a dunder, and a public name kept private under an alias
    (pkg / "a" / "two.py").write_text("def f():\n    from .one import _g\n    return _g\n")
    (pkg / "a" / "three.py").write_text("from mlit_edge.a.one import _g\nimport mlit_edge.a._four\n")
    assert private_imports(pkg) == ["mlit_edge.a.three:1: from mlit_edge.a.one import _g",
                                    "mlit_edge.a.three:2: import mlit_edge.a._four",
                                    "mlit_edge.a.two:2: from .one import _g"]


@pytest.mark.parametrize("name", sorted(modules()))
def test_modules_read_in_one_sitting(name):
    lines = len(modules()[name].read_text().splitlines())
    assert lines <= MAX_LINES, f"{name} has {lines} lines (at most {MAX_LINES})"


@pytest.mark.parametrize("literal", ["(18, 19, 20)", "(1, 8, 64)", '".plan", ".engine"', '"tensorrt_rtx"'])
def test_each_shared_constant_is_written_once(literal):
    where = [str(p.relative_to(PACKAGE)) for p in PACKAGE.rglob("*.py") if literal in p.read_text()]
    assert len(where) == 1, f"{literal} appears in {where}"


def readme_layout() -> dict[str, str]:
    """The README's layout block, each package folder's text (its line and the indented ones below it)."""
    block = (PACKAGE.parent / "README.md").read_text().split("## Layout", 1)[1].split("```", 2)[1]
    folders: dict[str, str] = {}
    current = None
    for line in block.splitlines():
        m = re.match(r"^  ([a-z_]+)(/|\.py)\s", line)
        if m:
            current = m.group(1) + m.group(2)
            folders[current] = line[m.end():]
        elif line.startswith("    ") and current:
            folders[current] += " " + line
        elif not line.startswith(" "):
            current = None
    return folders


def test_the_readme_layout_names_every_module():
    """Issue 48: the README's layout section is tested against the tree, so a new module is named there
    (with what it holds) or this fails, naming it."""
    folders = readme_layout()
    missing = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE)
        if path.name == "__init__.py" or path.name == "__main__.py" or rel.parts[0] == "weights":
            continue
        if len(rel.parts) == 1:
            if rel.name not in folders:
                missing.append(str(rel))
            continue
        text = folders.get(rel.parts[0] + "/", "")
        if not re.search(rf"(?<![\w.]){re.escape(path.stem)}(?![\w])", text):
            missing.append(str(rel))
    assert not missing, f"the README's layout section does not name: {', '.join(missing)}"


def test_no_package_file_is_ignored_by_git():
    """A module git ignores never reaches a clean clone (a root-level `artifacts/` rule once hid
    mlit_edge/artifacts/): every package file must be one git would commit."""
    import shutil
    import subprocess

    if shutil.which("git") is None or not (PACKAGE.parent / ".git").exists():
        pytest.skip("not a git checkout")
    files = [str(p.relative_to(PACKAGE.parent)) for p in PACKAGE.rglob("*") if p.is_file() and "__pycache__" not in p.parts]
    proc = subprocess.run(["git", "check-ignore", "--no-index", "--stdin"], input="\n".join(files), text=True,
                          capture_output=True, cwd=PACKAGE.parent)
    assert proc.stdout.strip() == "", f"git ignores package files: {proc.stdout.split()}"
