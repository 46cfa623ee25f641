"""The package's shape: folders by pipeline stage, imports only from earlier stages and the runtime,
no import cycles, no module longer than one sitting, one place for each shared constant."""
import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).parent.parent / "mlit_edge"
# Each stage may import the runtime (the torch-free floor) and the stages before it, never a later one.
ORDER = ["runtime", "model", "train", "export", "engine", "bench"]
TOP = {"cli", "quickstart", "__init__"}  # the top: may import every stage, and is imported by none
MAX_LINES = 300


def modules() -> dict[str, Path]:
    return {".".join(p.relative_to(PACKAGE.parent).with_suffix("").parts): p for p in PACKAGE.rglob("*.py")}


def imported(name: str, path: Path, top_level_only: bool = False) -> set[str]:
    """The mlit_edge modules `name` imports (relative imports resolved), at any depth or module level only."""
    tree = ast.parse(path.read_text())
    nodes = tree.body if top_level_only else list(ast.walk(tree))
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    out = set()
    for node in nodes:
        if isinstance(node, ast.ImportFrom):
            base = (package[:len(package) - node.level + 1] if node.level else [])
            target = ".".join(base + ([node.module] if node.module else []))
            if target.startswith("mlit_edge"):
                out.add(target)
                out.update(f"{target}.{a.name}" for a in node.names)
        elif isinstance(node, ast.Import):
            out.update(a.name for a in node.names if a.name.startswith("mlit_edge"))
    return out & set(modules()) | {t for t in out if t in {m.rsplit(".", 1)[0] for m in modules()}}


def stage(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def test_folders_are_the_pipeline_stages():
    folders = {p.name for p in PACKAGE.iterdir() if p.is_dir() and (p / "__init__.py").is_file()}
    assert folders == set(ORDER) | {"cli"}


@pytest.mark.parametrize("name", sorted(modules()))
def test_stages_import_only_earlier_stages_and_the_runtime(name):
    own = stage(name)
    if own in TOP:
        return
    for target in imported(name, modules()[name]):
        other = stage(target)
        if other == "__init__" and target == "mlit_edge":
            continue  # the version string
        assert other not in TOP, f"{name} imports {target} from the top"
        assert ORDER.index(other) <= ORDER.index(own), f"{name} ({own}) imports {target} ({other}), a later stage"
        if own == "runtime":
            assert other == "runtime", f"the runtime floor imports {target}"


def test_no_import_cycles_at_module_level():
    graph = {name: {t for t in imported(name, path, top_level_only=True) if t in modules() and t != name}
             for name, path in modules().items()}
    state: dict[str, int] = {}

    def visit(node: str, trail: list[str]) -> None:
        state[node] = 1
        for nxt in graph[node]:
            assert state.get(nxt) != 1, "import cycle: " + " -> ".join(trail + [node, nxt])
            if nxt not in state:
                visit(nxt, trail + [node])
        state[node] = 2

    for name in graph:
        if name not in state:
            visit(name, [])


@pytest.mark.parametrize("name", sorted(modules()))
def test_modules_read_in_one_sitting(name):
    lines = len(modules()[name].read_text().splitlines())
    assert lines <= MAX_LINES, f"{name} has {lines} lines (at most {MAX_LINES})"


@pytest.mark.parametrize("literal", ["(18, 19, 20)", "(1, 8, 64)", '".plan", ".engine"', '"tensorrt_rtx"'])
def test_each_shared_constant_is_written_once(literal):
    where = [str(p.relative_to(PACKAGE)) for p in PACKAGE.rglob("*.py") if literal in p.read_text()]
    assert len(where) == 1, f"{literal} appears in {where}"
