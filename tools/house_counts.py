"""The package's shape in figures, measured from its source (nothing is imported or run):

    python tools/house_counts.py [--repo DIR]

- rooms (the package's folders), the arrows between them (room A imports room B anywhere, inside functions
  and through module paths named in strings: tests/test_layout.py's reading), the arrows that reach a room
  `ALLOWED` does not give (a lower room reaching up), and whether any import cycle exists among modules;
- the share of import statements that stand inside functions;
- functions whose parameter `record` is annotated as a plain dict or mapping, and raw `record[...]` /
  `record.get(...)` lookups, the figures issue 48 counts with grep.

`--repo DIR` measures another checkout (an older commit's clone, for a before/after), with this checkout's
reading rules.
"""
from __future__ import annotations

import argparse
import ast
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.layout_rules import ALLOWED, TOP, arrows, cycle_in  # noqa: E402

RECORD_PARAM = re.compile(r"record: (dict|Mapping|Dict)")
RAW_LOOKUP = re.compile(r"record\[|record\.get\(")


def imports_inside_functions(package: Path) -> tuple[int, int]:
    """(inside functions, all) import statements of the package; `from __future__` is a compiler directive, not
    counted."""
    inside = total = 0
    for path in package.rglob("*.py"):
        def walk(node: ast.AST, in_function: bool) -> None:
            nonlocal inside, total
            for child in ast.iter_child_nodes(node):
                if isinstance(child, (ast.Import, ast.ImportFrom)) and getattr(child, "module", None) != "__future__":
                    total += 1
                    inside += in_function
                walk(child, in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)))
        walk(ast.parse(path.read_text()), False)
    return inside, total


def grep_counts(package: Path, pattern: re.Pattern) -> tuple[int, int]:
    """(matching lines, files) of `pattern` in the package's Python files."""
    lines = files = 0
    for path in package.rglob("*.py"):
        hits = sum(1 for line in path.read_text().splitlines() if pattern.search(line))
        lines, files = lines + hits, files + (hits > 0)
    return lines, files


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repo", type=Path, default=ROOT, help="the checkout to measure [this one]")
    package = ap.parse_args().repo.resolve() / "mlit_edge"
    if not package.is_dir():
        print(f"house_counts: {package} is not a folder: pass --repo a checkout of mlit-edge", file=sys.stderr)
        return 1
    rooms = sorted(p.name for p in package.iterdir() if (p / "__init__.py").is_file() and p.name not in TOP)
    ties = arrows(package)
    # the layout test's reading: a room reaching the top, or a room its line in ALLOWED does not give
    up = sorted(f"{a} -> {b}" for (a, b) in ties
                if a not in TOP and (b in TOP or b not in ALLOWED.get(a, set(ALLOWED))))
    inside, total = imports_inside_functions(package)
    cycle = cycle_in(package)
    print(f"rooms: {len(rooms)} ({', '.join(rooms)}) + the top (cli/, api.py, quickstart.py)")
    print(f"arrows between rooms: {len(ties)}; arrows ALLOWED does not give: {len(up)}"
          + (f" ({'; '.join(up)})" if up else ""))
    print(f"import cycles: {'none' if cycle is None else ' -> '.join(cycle)}")
    print(f"imports inside functions: {inside}/{total} = {100 * inside / max(total, 1):.1f} %")
    print("functions taking `record: dict|Mapping|Dict`: %d lines in %d files" % grep_counts(package, RECORD_PARAM))
    print("raw record[...] / record.get( lookups: %d lines in %d files" % grep_counts(package, RAW_LOOKUP))
    return 0


if __name__ == "__main__":
    sys.exit(main())
