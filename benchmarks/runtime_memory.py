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
import sys
import tempfile
from pathlib import Path

from before_after import random_xxs_onnx, run_capped, trees

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

    from mlit_edge.artifacts.sidecar import read_sidecar, write_sidecar

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
    run = run_capped([sys.executable, *args], tree, env, cap_mb)
    if run.code is None:
        return f"> {cap_mb:.0f} MB (killed at the cap)"
    outcome = "ok" if run.code == 0 else f"exit {run.code}: {run.last[:70]}"
    return f"{run.peak_mb:.0f} MB ({outcome})"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--before", help="a git revision to measure beside this checkout")
    ap.add_argument("--cap-mb", type=float, default=6000.0)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        model = random_xxs_onnx(folder)
        cases = {"28x28 PNG": _png(folder / "small.png", 28, 28),
                 "1 x 1,000,000 PNG": _png(folder / "wide1M.png", 1_000_000, 1),
                 "1 x 20,000,000 PNG": _png(folder / "wide20M.png", 20_000_000, 1)}
        commands = {name: ["-m", "mlit_edge.cli", "predict", str(path), "--model", str(model), "--max-pixels",
                           "30000000"] for name, path in cases.items()}
        commands["100,000 arrays of 2x2"] = ["-c", ARRAYS.format(model=str(model))]
        commands["fixed batch 1,000,000, one image"] = ["-m", "mlit_edge.cli", "predict", str(cases["28x28 PNG"]),
                                                         "--model", str(_static_batch(folder, model, 1_000_000))]
        with trees(args.before, folder) as found:
            print(f"| case | {' | '.join(found)} |\n|---|{'---|' * len(found)}")
            for name, command in commands.items():
                print(f"| {name} | {' | '.join(_run(tree, command, args.cap_mb) for tree in found.values())} |",
                      flush=True)


if __name__ == "__main__":
    main()
