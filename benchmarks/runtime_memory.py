"""Peak memory of the runtime on the hostile inputs of issue 25, this checkout against an earlier one,
side by side in one run.

    python benchmarks/runtime_memory.py [--before REV] [--cap-mb 6000]

Each case runs in a fresh process (`mlit-edge predict`, or `Classifier.predict` for arrays); its peak
RSS is the kernel's (wait4's ru_maxrss). A process whose RSS passes --cap-mb is killed and reported
as "> cap", so a case that once took 40 GB does not take this machine down with it. `--before REV`
checks REV out into a temporary git worktree and runs the same cases with it. The artifact is an XXS
export with random weights (memory does not depend on the weights). Linux only.
"""
from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
ARRAYS = """
import numpy as np
from mlit_edge.runtime import Classifier
with Classifier.load({model!r}) as clf:
    preds = clf.predict(np.zeros((100000, 2, 2, 3), np.uint8))
assert len(preds) == 100000
"""


def _png(path: Path, width: int, height: int) -> Path:
    from PIL import Image

    Image.new("L", (width, height), 128).save(path, optimize=True)
    return path


def _static_batch(folder: Path, model: Path, batch: int) -> Path:
    """The artifact re-declared with a fixed batch (graph input and output, sidecar), as a hostile file would."""
    import onnx

    from mlit_edge.runtime.sidecar import read_sidecar, write_sidecar

    proto = onnx.load(str(model))
    for value in (*proto.graph.input, *proto.graph.output):
        value.type.tensor_type.shape.dim[0].dim_value = batch
    path = folder / f"static-{batch}.onnx"
    onnx.save(proto, str(path))
    record = {k: v for k, v in read_sidecar(model).items() if k in ("precision", "classes", "preprocess")}
    write_sidecar(path, {**record, "batch": batch})
    return path


def _run(tree: Path, args: list[str], cap_mb: float) -> str:
    env = {**os.environ, "PYTHONPATH": str(tree), "OMP_NUM_THREADS": "2"}
    with tempfile.TemporaryFile() as err:
        proc = subprocess.Popen([sys.executable, *args], cwd=tree, env=env, stdout=subprocess.DEVNULL, stderr=err)
        capped = False
        while True:  # reaped by wait4 here, not by Popen, so that its rusage (the peak RSS) is ours to read
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
        proc.returncode = os.waitstatus_to_exitcode(status)
        err.seek(0)
        lines = err.read().decode(errors="replace").strip().splitlines()
    if capped:
        return f"> {cap_mb:.0f} MB (killed at the cap)"
    outcome = "ok" if proc.returncode == 0 else f"exit {proc.returncode}: {lines[-1][:70] if lines else ''}"
    return f"{usage.ru_maxrss / 1024:.0f} MB ({outcome})"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--before", help="a git revision to measure beside this checkout")
    ap.add_argument("--cap-mb", type=float, default=6000.0)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        model = folder / "mlit-xxs-fp32.onnx"
        subprocess.run([sys.executable, "-m", "mlit_edge.cli", "export", "--size", "xxs", "--random-weights", "--out",
                        str(model)], cwd=ROOT, check=True, capture_output=True)
        cases = {"28x28 PNG": _png(folder / "small.png", 28, 28),
                 "1 x 1,000,000 PNG": _png(folder / "wide1M.png", 1_000_000, 1),
                 "1 x 20,000,000 PNG": _png(folder / "wide20M.png", 20_000_000, 1)}
        commands = {name: ["-m", "mlit_edge.cli", "predict", str(path), "--model", str(model), "--max-pixels",
                           "30000000"] for name, path in cases.items()}
        commands["100,000 arrays of 2x2"] = ["-c", ARRAYS.format(model=str(model))]
        commands["fixed batch 1,000,000, one image"] = ["-m", "mlit_edge.cli", "predict", str(cases["28x28 PNG"]),
                                                         "--model", str(_static_batch(folder, model, 1_000_000))]
        trees = {"this checkout": ROOT}
        if args.before:
            trees[args.before] = folder / "before"
            subprocess.run(["git", "worktree", "add", "--detach", str(trees[args.before]), args.before], cwd=ROOT,
                           check=True, capture_output=True)
        try:
            print(f"| case | {' | '.join(trees)} |\n|---|{'---|' * len(trees)}")
            for name, command in commands.items():
                print(f"| {name} | {' | '.join(_run(tree, command, args.cap_mb) for tree in trees.values())} |",
                      flush=True)
        finally:
            if args.before:
                subprocess.run(["git", "worktree", "remove", "--force", str(trees[args.before])], cwd=ROOT,
                               capture_output=True)


if __name__ == "__main__":
    main()
