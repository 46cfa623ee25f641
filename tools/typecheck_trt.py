"""Type-check the TensorRT-facing modules against NVIDIA's TensorRT Python API (`tensorrt-stubs` 10.13, and
the same stubs cut down to what each older release's bindings define).

    python tools/typecheck_trt.py            # fetches the stubs once, then runs mypy; exit status is mypy's
    python tools/typecheck_trt.py --no-fetch # the tests' form: fails, naming the fetch command, without them
    python tools/typecheck_trt.py --tensorrt 8.5   # against TensorRT 8.5's API (JetPack 5.1)

NVIDIA publishes typed stubs for 10.13 only. For 8.5, 8.6 and 10.3 the 10.13 stubs are cut down: every class,
member, enum value and function that TensorRT 10.13's pybind11 bindings define and that release's do not
(mlit_edge/engine/data/trt_python_api.json, generated from NVIDIA/TensorRT's release branches by
tools/gen_trt_sources.py) is deleted from the stubs. mypy then fails on any use of a name the release lacks
that is not guarded (`hasattr` narrows), on every code path at once, so each profile's path is checked
(a name only older releases have, such as 8.x's EXPLICIT_PRECISION, is not added: our code uses none).

The stubs' wheel cannot simply be installed: it declares TensorRT itself as a dependency (not installable
off NVIDIA's hosts), and a bare `tensorrt/` folder in site-packages would import as an empty `tensorrt`
package. So the wheel is fetched with `pip download --no-deps` and unpacked into `.cache/` in the checkout
(ignored by git; `python tools/fetch_test_deps.py`, which the README's test command runs, fetches it
there before the tests), and mypy runs with that folder on MYPYPATH and pyproject.toml's [tool.mypy] settings
(the module list is there). The generated stubs have five lines that are not valid Python (a parameter
named `in`, a parameter without a default after defaulted ones); those are repaired in the copy, and
the repairs are printed.
"""
from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
STUBS = "tensorrt-stubs==10.13.0.35.1"
CACHE = ROOT / ".cache" / "tensorrt-stubs-10.13.0.35.1"
FETCH_COMMAND = "python tools/fetch_test_deps.py"  # fetches these stubs (and the tests' other downloads)
# (pattern, replacement) for the stubs' invalid lines, applied to `def` lines only
REPAIRS = [(re.compile(r"([(, ])in:"), r"\1in_:"),
           (re.compile(r"(power: Weights = None, channel_axis: int)\)"), r"\1 = ...)")]


def cached(cache: Path = CACHE) -> bool:
    """Whether `cache` holds the fetched and repaired stubs."""
    return (cache / "tensorrt_bindings" / "tensorrt.pyi").is_file()


def missing_message(cache: Path = CACHE) -> str:
    return f"{STUBS} is not in {cache}: `{FETCH_COMMAND}` fetches it from the package index"


def fetch(cache: Path = CACHE, download: bool = True) -> tuple[Path, int]:
    """The folder holding `tensorrt/` and `tensorrt_bindings/` stubs (fetched and repaired once), and how
    many lines were repaired when it was made (0 when it was cached). Without `download`, a missing
    cache is an error that names the command that fetches it."""
    if cached(cache):
        return cache, 0
    if not download:
        raise SystemExit(missing_message(cache))
    with tempfile.TemporaryDirectory() as tmp:
        proc = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", STUBS, "-d", tmp],
                              capture_output=True, text=True)
        wheels = list(Path(tmp).glob("*.whl"))
        if proc.returncode or not wheels:
            raise SystemExit(f"cannot fetch {STUBS} from the package index: {proc.stderr.strip()[-300:]}")
        staging = cache.with_name(cache.name + ".partial")
        with zipfile.ZipFile(wheels[0]) as whl:
            whl.extractall(staging, [n for n in whl.namelist() if n.endswith(".pyi")])
    repaired = 0
    for stub in staging.rglob("*.pyi"):
        lines = stub.read_text().splitlines(keepends=True)
        for i, line in enumerate(lines):
            if line.lstrip().startswith("def "):
                for pattern, replacement in REPAIRS:
                    line, n = pattern.subn(replacement, line)
                    repaired += n
                lines[i] = line
        stub.write_text("".join(lines))
    os.replace(staging, cache)
    return cache, repaired


def cut_down(stubs: Path, version: str, out: Path) -> tuple[Path, int, str]:
    """A copy of the 10.13 `stubs` in `out` without what TensorRT `version`'s bindings lack; returns the copy,
    how many names were removed, and the API data's source line for that release."""
    import ast
    import shutil

    sys.path.insert(0, str(ROOT))
    from mlit_edge.engine.trt_sources import api_names

    newest, old = api_names("10.13"), api_names(version)
    if out.exists():
        shutil.rmtree(out)
    shutil.copytree(stubs, out)
    stub = out / "tensorrt_bindings" / "tensorrt.pyi"
    tree = ast.parse(stub.read_text())
    removed = 0

    def lacks(cls: str | None, name: str) -> bool:
        if cls is None:
            return newest.has(name) and not old.has(name)
        return newest.has(cls, name) and not old.has(cls, name)

    def names(node: ast.stmt) -> list[str]:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            return [node.name]
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            return [node.target.id]
        if isinstance(node, ast.Assign):
            return [t.id for t in node.targets if isinstance(t, ast.Name)]
        return []

    body = []
    for node in tree.body:
        if any(lacks(None, n) for n in names(node)):
            removed += 1
            continue
        if isinstance(node, ast.ClassDef) and (node.name in newest.classes or node.name in newest.enums):
            kept = [m for m in node.body if not any(lacks(node.name, n) for n in names(m))]
            removed += len(node.body) - len(kept)
            node.body = kept or [ast.Expr(ast.Constant(...))]
        body.append(node)
    tree.body = body
    stub.write_text(ast.unparse(tree) + "\n")
    return out, removed, old.source


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cache", type=Path, default=CACHE, help="where the unpacked stubs live [%(default)s]")
    parser.add_argument("--no-fetch", action="store_true",
                        help=f"fail instead of downloading when the stubs are not cached (`{FETCH_COMMAND}` fetches them)")
    parser.add_argument("--tensorrt", default="10.13", choices=["8.5", "8.6", "10.3", "10.13"],
                        help="the release whose API to check against [%(default)s: the stubs as NVIDIA ships them]")
    parser.add_argument("--files", nargs="*", default=None, help="check these files instead of pyproject's list")
    args = parser.parse_args()
    stubs, repaired = fetch(args.cache, download=not args.no_fetch)
    if repaired:
        print(f"{STUBS}: repaired {repaired} invalid line(s) of the generated stubs in {stubs}")
    if args.tensorrt != "10.13":
        stubs, removed, source = cut_down(stubs, args.tensorrt, args.cache.with_name(f"tensorrt-stubs-for-{args.tensorrt}"))
        print(f"TensorRT {args.tensorrt}: the 10.13 stubs less {removed} names its bindings lack ({source})")
    env = {**os.environ, "MYPYPATH": str(stubs)}
    if args.files:
        return subprocess.run([sys.executable, "-m", "mypy", "--config-file", str(ROOT / "pyproject.toml"),
                               *args.files], cwd=ROOT, env=env).returncode
    return subprocess.run([sys.executable, "-m", "mypy", "--config-file", str(ROOT / "pyproject.toml")], cwd=ROOT,
                          env=env).returncode


if __name__ == "__main__":
    sys.exit(main())
