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

ROOT = Path(__file__).resolve().parent.parent
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
    with tempfile.TemporaryFile() as err:
        proc = subprocess.Popen([sys.executable, "-m", "mlit_edge.cli", "build", "--size", "xxs", "--random-weights",
                                 "--precision", "fp32", "--target", "onnxruntime", "--batch", "50000", "--no-eval",
                                 "--out", str(work / "out")], cwd=tree, env=_env(tree), stdout=subprocess.DEVNULL,
                                stderr=err)
        capped = False
        while True:  # reaped by wait4 here, so that its rusage (the peak RSS) is ours to read
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            try:
                pages = int(Path(f"/proc/{proc.pid}/statm").read_text().split()[1])
            except (OSError, IndexError, ValueError):
                pages = 0
            if pages * os.sysconf("SC_PAGE_SIZE") / 2 ** 20 > cap_mb:
                os.kill(proc.pid, signal.SIGKILL)
                capped = True
            time.sleep(0.02)
        err.seek(0)
        lines = err.read().decode(errors="replace").strip().splitlines()
    if capped:
        return f"> {cap_mb:.0f} MB of RSS, killed at the cap (last line: {lines[-1][:60] if lines else ''})"
    code = os.waitstatus_to_exitcode(status)
    last = lines[-1][:90] if lines else ""
    traceback = any(line.startswith("Traceback") for line in lines)
    return f"exit {code}, peak RSS {usage.ru_maxrss / 1024:.0f} MB{', a traceback' if traceback else ''}: {last}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--before", help="a git revision to measure beside this checkout")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        model = folder / "mlit-xxs-fp32.onnx"
        subprocess.run([sys.executable, "-m", "mlit_edge.cli", "export", "--size", "xxs", "--random-weights", "--out",
                        str(model)], cwd=ROOT, check=True, capture_output=True)
        trees = {"this checkout": ROOT}
        if args.before:
            trees[args.before] = folder / "before"
            subprocess.run(["git", "worktree", "add", "--detach", str(trees[args.before]), args.before], cwd=ROOT,
                           check=True, capture_output=True)
        cases = {"results file rotated, then deleted": rotated, "done/ cannot be written": unmovable,
                 "six 1 x 1,000,000 px PNGs": wide, "build --batch 50000": big_batch}
        try:
            print(f"| case | {' | '.join(trees)} |\n|---|{'---|' * len(trees)}")
            for i, (name, case) in enumerate(cases.items()):
                cells = []
                for j, tree in enumerate(trees.values()):
                    work = folder / f"case{i}-{j}"
                    work.mkdir()
                    cells.append(case(tree, model, work))
                print(f"| {name} | {' | '.join(cells)} |", flush=True)
        finally:
            if args.before:
                subprocess.run(["git", "worktree", "remove", "--force", str(trees[args.before])], cwd=ROOT,
                               capture_output=True)


if __name__ == "__main__":
    main()
