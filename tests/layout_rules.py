"""The package's layout rules, read from the source (nothing is imported or run): the rooms and the rooms each
may import (`ALLOWED`), the module graph through every import and every module path named in a string, and its
cycles. tests/test_layout.py holds the package to them; tools/house_counts.py prints the same reading."""
from __future__ import annotations

import ast
import re
from pathlib import Path

PACKAGE = Path(__file__).parent.parent / "mlit_edge"
# Each room and the rooms it may import: the torch-free floor rooms first (a device installs those), then the
# pipeline's stages, each standing on the stages before it. Nothing may import a room not on its line.
ALLOWED = {
    "base": set(),  # messages, value rules, text reads, signals, shims: everything stands on it
    "artifacts": {"base"},  # the record, the sidecar and the file contracts
    "devices": {"base", "artifacts"},  # TensorRT and Jetson rules beside the device table
    "runtime": {"base", "artifacts", "devices"},  # the device runtime: runners, classifier, serve, stream
    "stacks": {"base", "artifacts", "devices", "runtime"},  # Triton and DeepStream
    "model": {"base"},
    "train": {"base", "artifacts", "runtime", "model"},
    "export": {"base", "artifacts", "devices", "runtime", "model", "train"},
    "engine": {"base", "artifacts", "devices", "runtime", "model", "train", "export"},
    "bench": {"base", "artifacts", "devices", "runtime", "model", "train", "export", "engine"},
}
FLOOR = ("base", "artifacts", "devices", "runtime", "stacks")  # torch-free: what a device installs
TOP = {"cli", "quickstart", "api", "__init__"}  # the top: may import every room, and is imported by none
MAX_LINES = 300
NAMED = re.compile(r"^mlit_edge(\.\w+)+(:\w+)?$")  # a module path in a string


def modules(package: Path = PACKAGE) -> dict[str, Path]:
    return {".".join(p.relative_to(package.parent).with_suffix("").parts).removesuffix(".__init__"): p
            for p in package.rglob("*.py")}


def imported(name: str, path: Path, known: set[str]) -> dict[str, str]:
    """The mlit_edge modules `name` ties itself to, each with how: 'import' (at any depth, relative
    imports resolved) or 'string' (a module path named in a string literal)."""
    tree = ast.parse(path.read_text())
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    out: dict[str, str] = {}

    def add(target: str, how: str) -> None:
        if target.startswith("mlit_edge"):
            out.setdefault(target, how)

    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            base = package[:len(package) - node.level + 1] if node.level else []
            target = ".".join(base + ([node.module] if node.module else []))
            add(target, "import")
            for a in node.names:  # `from . import checkpoint` imports a module
                if f"{target}.{a.name}" in known:
                    add(f"{target}.{a.name}", "import")
        elif isinstance(node, ast.Import):
            for a in node.names:
                add(a.name, "import")
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and NAMED.match(node.value):
            add(node.value.split(":")[0], "string")
    return out


def graph(package: Path = PACKAGE) -> dict[str, dict[str, str]]:
    known = set(modules(package))
    return {name: imported(name, path, known) for name, path in modules(package).items()}


def stage(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def find_cycle(edges: dict[str, set[str]]) -> list[str] | None:
    """One import cycle as a list of modules (first == last), or None."""
    state: dict[str, int] = {}

    def visit(node: str, trail: list[str]) -> list[str] | None:
        state[node] = 1
        for nxt in sorted(edges.get(node, ())):
            if state.get(nxt) == 1:
                return trail[trail.index(nxt):] + [node, nxt] if nxt in trail else [node, nxt]
            if nxt not in state:
                found = visit(nxt, trail + [node])
                if found:
                    return found
        state[node] = 2
        return None

    for name in sorted(edges):
        if name not in state:
            found = visit(name, [])
            if found:
                return found
    return None


def cycle_in(package: Path = PACKAGE) -> list[str] | None:
    """A cycle among the package's modules through any import or named module path. A package's
    __init__ is left out: `import mlit_edge.x.y` runs it, but it hands names on and ties no cycle."""
    g = graph(package)
    known = set(g)
    edges = {name: {t for t in targets if t in known and t != name and not _is_package(t, package)}
             for name, targets in g.items()}
    return find_cycle(edges)


def _is_package(module: str, package: Path) -> bool:
    return modules(package)[module].name == "__init__.py"


def arrows(package: Path = PACKAGE) -> dict[tuple[str, str], list[str]]:
    """(room, room) -> the module imports that make that arrow, over the whole package."""
    out: dict[tuple[str, str], list[str]] = {}
    for name, targets in graph(package).items():
        for target in targets:
            own, other = stage(name), stage(target)
            if own != other and target != "mlit_edge":  # the version string
                out.setdefault((own, other), []).append(f"{name} -> {target}")
    return out
