"""Type-check the TensorRT-facing modules against NVIDIA's TensorRT 10.13 Python API (`tensorrt-stubs`).

    python tools/typecheck_trt.py            # fetches the stubs once, then runs mypy; exit status is mypy's
    python tools/typecheck_trt.py --no-fetch # the tests' form: fails, naming the fetch command, without them

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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cache", type=Path, default=CACHE, help="where the unpacked stubs live [%(default)s]")
    parser.add_argument("--no-fetch", action="store_true",
                        help=f"fail instead of downloading when the stubs are not cached (`{FETCH_COMMAND}` fetches them)")
    args = parser.parse_args()
    stubs, repaired = fetch(args.cache, download=not args.no_fetch)
    if repaired:
        print(f"{STUBS}: repaired {repaired} invalid line(s) of the generated stubs in {stubs}")
    env = {**os.environ, "MYPYPATH": str(stubs)}
    return subprocess.run([sys.executable, "-m", "mypy", "--config-file", str(ROOT / "pyproject.toml")], cwd=ROOT,
                          env=env).returncode


if __name__ == "__main__":
    sys.exit(main())
