"""The serious cases of issue 24 (the device loop under faults), this checkout against an earlier one, side
by side in one run: rows per image, memory, and what `build` does with a batch that cannot fit.

    python benchmarks/serve_faults.py [--before REV]

Cases, each in fresh processes of `mlit-edge serve` or `build` from the tree under test:
- the results file renamed (as logrotate does) and then deleted while serving: rows recorded in any
  results file against images moved to done/;
- a done/ that cannot be written (a link to another file system, since root writes anywhere): rows for
  two images after 3 s of serving;
- six 1 x 1,000,000 px PNGs of distinct widths: the server's RSS before and after them;
- `build --batch 50000`: exit code, peak RSS and the last line.
`--before REV` checks REV out into a temporary git worktree. The artifact is an XXS export with random
weights. Linux only.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from before_after import random_xxs_onnx, run_capped, trees

# the scenario of tests/runtime/test_serve_faults.py, written with what every tree has (RSS from /proc), since
# it also runs in the tree before issue 24
WIDE = """
import json, sys
from pathlib import Path
import numpy as np
from PIL import Image
from mlit_edge.runtime import watch

def rss_mb():
    return int(Path("/proc/self/statm").read_text().split()[1]) * 4096 / 2 ** 20

model, folder = Path(sys.argv[1]), Path(sys.argv[2])
inbox = folder / "inbox"
inbox.mkdir()
Image.fromarray(np.full((28, 28), 9, np.uint8)).save(inbox / "small.png")
watch(model, inbox, folder / "r.jsonl", interval_s=0.01, max_files=1, settle_s=0)
base = rss_mb()
for i in range(6):
    Image.fromarray(np.full((1, 1_000_000 + 1000 * i), 200, np.uint8)).save(inbox / f"wide{i}.png")
watch(model, inbox, folder / "r.jsonl", interval_s=0.01, max_files=6, settle_s=0)
print(json.dumps({"base": base, "after": rss_mb()}))
"""


def _env(tree: Path) -> dict:
    return {**os.environ, "PYTHONPATH": str(tree), "OMP_NUM_THREADS": "1"}


def _drop(inbox: Path, names) -> None:
    from PIL import Image

    for name in names:
        Image.fromarray(np.full((28, 28), 200, np.uint8)).save(inbox / f".{name}", format="PNG")
        os.replace(inbox / f".{name}", inbox / name)


def _serve(tree: Path, model: Path, inbox: Path, results: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "mlit_edge.cli", "serve", "--model", str(model), "--inbox",
                             str(inbox), "--results", str(results), "--interval", "0.05", "--settle", "0"],
                            cwd=tree, env=_env(tree), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def _stop(proc: subprocess.Popen) -> None:
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def _rows(*files: Path) -> int:
    return sum(len(f.read_text().splitlines()) for f in files if f.exists())


def _wait(condition, timeout: float = 60.0) -> bool:
    end = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > end:
            return False
        time.sleep(0.1)
    return True


def rotated(tree: Path, model: Path, work: Path) -> str:
    inbox, results, old = work / "inbox", work / "results.jsonl", work / "results.jsonl.1"
    inbox.mkdir()
    done = lambda n: lambda: len(list((inbox / "done").glob("*.png"))) == n  # noqa: E731
    proc = _serve(tree, model, inbox, results)
    try:
        _drop(inbox, ["a.png", "b.png", "c.png"])
        _wait(done(3))
        os.rename(results, old)  # logrotate
        _drop(inbox, ["d.png", "e.png", "f.png"])
        _wait(done(6))
        time.sleep(0.5)
        in_new, in_old = _rows(results), _rows(old)
        results.unlink(missing_ok=True)  # deleted outright
        _drop(inbox, ["g.png"])
        _wait(done(7))
        time.sleep(0.5)
        after_delete = _rows(results)
    finally:
        _stop(proc)
    return (f"after the rename, d-f: {in_new} rows in results.jsonl ({in_old} in all in the renamed file); "
            f"after the delete, g: {after_delete} row")


def unmovable(tree: Path, model: Path, work: Path) -> str:
    inbox, results = work / "inbox", work / "results.jsonl"
    inbox.mkdir()
    elsewhere = Path(tempfile.mkdtemp(dir="/dev/shm"))
    (inbox / "done").symlink_to(elsewhere, target_is_directory=True)
    try:
        _drop(inbox, ["a.png", "b.png"])
        proc = _serve(tree, model, inbox, results)
        time.sleep(3)
        _stop(proc)
    finally:
        shutil.rmtree(elsewhere, ignore_errors=True)
    return f"{_rows(results)} rows for 2 images in 3 s"


def wide(tree: Path, model: Path, work: Path) -> str:
    proc = subprocess.run([sys.executable, "-c", WIDE, str(model), str(work)], cwd=tree, env=_env(tree),
                          capture_output=True, text=True, timeout=600)
    if proc.returncode:
        return f"exit {proc.returncode}: {proc.stderr.strip().splitlines()[-1][:80]}"
    mb = json.loads(proc.stdout.splitlines()[-1])
    return f"RSS {mb['base']:.0f} MB -> {mb['after']:.0f} MB"


def big_batch(tree: Path, model: Path, work: Path, cap_mb: float = 6000.0) -> str:
    """Killed past `cap_mb` of RSS: unchecked, this build took 23.7 GB here before the kernel's OOM killer."""
    run = run_capped([sys.executable, "-m", "mlit_edge.cli", "build", "--size", "xxs", "--random-weights", "--precision",
                      "fp32", "--target", "onnxruntime", "--batch", "50000", "--no-eval", "--out", str(work / "out")],
                     tree, _env(tree), cap_mb)
    if run.code is None:
        return f"> {cap_mb:.0f} MB of RSS, killed at the cap (last line: {run.last[:60]})"
    traceback = any(line.startswith("Traceback") for line in run.lines)
    return f"exit {run.code}, peak RSS {run.peak_mb:.0f} MB{', a traceback' if traceback else ''}: {run.last[:90]}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--before", help="a git revision to measure beside this checkout")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        model = random_xxs_onnx(folder)
        cases = {"results file rotated, then deleted": rotated, "done/ cannot be written": unmovable,
                 "six 1 x 1,000,000 px PNGs": wide, "build --batch 50000": big_batch}
        with trees(args.before, folder) as found:
            print(f"| case | {' | '.join(found)} |\n|---|{'---|' * len(found)}")
            for i, (name, case) in enumerate(cases.items()):
                cells = []
                for j, tree in enumerate(found.values()):
                    work = folder / f"case{i}-{j}"
                    work.mkdir()
                    cells.append(case(tree, model, work))
                print(f"| {name} | {' | '.join(cells)} |", flush=True)


if __name__ == "__main__":
    main()
