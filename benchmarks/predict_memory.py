"""Memory and time of `Classifier.predict` on a batch of VGA frames, in a fresh process.

    python benchmarks/predict_memory.py ARTIFACT.onnx [--frames 512]

Prints the RSS before the call (the frames included), the peak during it (VmHWM, reset just before
the call through /proc/self/clear_refs) and the wall time. Linux only; torch is never imported.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np


def _status_mb(key: str) -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(key):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"{key} not in /proc/self/status")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("artifact")
    ap.add_argument("--frames", type=int, default=512)
    args = ap.parse_args()
    from mlit_edge.runtime import Classifier

    frames = np.random.default_rng(0).integers(0, 256, (args.frames, 480, 640, 3), dtype=np.uint8)
    with Classifier.load(args.artifact) as clf:
        clf.predict(frames[:2])  # warm the session
        before = _status_mb("VmRSS:")
        Path("/proc/self/clear_refs").write_text("5")  # reset VmHWM to the current RSS
        start = time.perf_counter()
        preds = clf.predict(frames)
        wall = time.perf_counter() - start
        peak = _status_mb("VmHWM:")
    assert len(preds) == args.frames and "torch" not in sys.modules
    print(f"{args.frames} VGA frames ({frames.nbytes / 2 ** 20:.0f} MB uint8): predict {wall:.1f} s; RSS before the "
          f"call {before:.0f} MB, peak during it {peak:.0f} MB (+{peak - before:.0f} MB)")


if __name__ == "__main__":
    main()
