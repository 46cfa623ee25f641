"""Latency of two ONNX files of the same model side by side in one process (e.g. the previous release's
export against this one's): ONNX Runtime CPU sessions with the same settings, alternating rounds so that
machine noise hits both alike, medians per batch.

    python benchmarks/compare_onnx.py BEFORE.onnx AFTER.onnx [--batches 1,8,64] [--rounds 7]
"""
from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
import onnxruntime as ort


def per_call_ms(session: ort.InferenceSession, x: np.ndarray, seconds: float) -> float:
    """Mean milliseconds per call over about `seconds` of calls, after three warm-up calls."""
    feed = {session.get_inputs()[0].name: x}
    for _ in range(3):
        session.run(None, feed)
    calls, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        session.run(None, feed)
        calls += 1
    return (time.perf_counter() - start) / calls * 1e3


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("before")
    ap.add_argument("after")
    ap.add_argument("--batches", default="1,8,64")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--seconds", type=float, default=0.5, help="timed calls per file per round")
    args = ap.parse_args()
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
    sessions = {k: ort.InferenceSession(p, so, providers=["CPUExecutionProvider"])
                for k, p in (("before", args.before), ("after", args.after))}
    shape = [d if isinstance(d, int) else 1 for d in sessions["after"].get_inputs()[0].shape]
    rng = np.random.default_rng(0)
    for b in map(int, args.batches.split(",")):
        x = rng.random((b, *shape[1:]), dtype=np.float32)
        times = {k: [] for k in sessions}
        for _ in range(args.rounds):
            for k, s in sessions.items():
                times[k].append(per_call_ms(s, x, args.seconds))
        m = {k: statistics.median(v) for k, v in times.items()}
        print(f"batch {b:3d}: before {m['before']:8.2f} ms  after {m['after']:8.2f} ms  "
              f"speed-up {m['before'] / m['after']:.2f}x")


if __name__ == "__main__":
    main()
