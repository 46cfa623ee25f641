"""Timing as trtexec does it: warm up by time *and* by count, time every call, nearest-rank percentiles.

The p-th percentile of n sorted samples is the ceil(p/100 * n)-th smallest: a value that was
actually measured. The harness's own cost per call is measured on a runner that does nothing.
"""
from __future__ import annotations

import math
import time
from typing import Callable

import numpy as np

from ..runtime.runners import Runner

PERCENTILES = (50, 90, 95, 99)


def percentile(sorted_ms: list[float] | np.ndarray, p: float) -> float:
    """Nearest-rank percentile of already sorted samples."""
    n = len(sorted_ms)
    if n == 0:
        raise ValueError("no samples")
    rank = max(1, math.ceil(p / 100.0 * n))
    return float(sorted_ms[rank - 1])


def latency_stats(samples_ms: list[float], batch: int, wall_s: float | None = None) -> dict:
    """min/mean/median/p90/p95/p99/max in ms, and throughput in images/s (over the timed wall time
    when given, else over the sum of the samples)."""
    s = np.sort(np.asarray(samples_ms, dtype=np.float64))
    total_s = wall_s if wall_s else float(s.sum()) / 1e3
    return {"iterations": int(len(s)), "min": float(s[0]), "mean": float(s.mean()), "median": percentile(s, 50),
            **{f"p{p}": percentile(s, p) for p in PERCENTILES if p != 50}, "max": float(s[-1]),
            "throughput": batch * len(s) / total_s if total_s > 0 else float("inf")}


def time_runner(infer: Callable[[], object], batch: int, warmup_ms: float = 200.0, warmup_iters: int = 10,
                duration_s: float | None = 2.0, iterations: int | None = None, min_iters: int = 10,
                gpu_ms: Callable[[], float | None] | None = None) -> dict:
    """Warm up by time and by count, then time each call; returns `latency_stats` (+ GPU compute)."""
    start = time.perf_counter()
    n = 0
    while n < warmup_iters or (time.perf_counter() - start) * 1e3 < warmup_ms:
        infer()
        n += 1
    samples, gpu = [], []
    t0 = time.perf_counter()
    while True:
        a = time.perf_counter()
        infer()
        samples.append((time.perf_counter() - a) * 1e3)
        if gpu_ms is not None and (g := gpu_ms()) is not None:
            gpu.append(g)
        if iterations is not None:
            if len(samples) >= iterations:
                break
        elif len(samples) >= min_iters and time.perf_counter() - t0 >= duration_s:
            break
    wall_s = time.perf_counter() - t0
    stats = latency_stats(samples, batch, wall_s)
    stats["wall_s"] = wall_s  # the timed calls' wall time: what energy per image is integrated over (bench.power)
    stats["warmup_iterations"] = n
    if gpu:
        stats["gpu_compute"] = {k: v for k, v in latency_stats(gpu, batch).items() if k != "throughput"}
    stats["samples_ms"] = samples
    return stats


class NullRunner(Runner):
    """Returns its input: what the timing loop costs by itself."""

    name = "null"

    def activate_impl(self) -> None:
        self.input_names, self.output_names = ["images"], ["logits"]

    def infer_impl(self, feed):
        return {"logits": feed["images"]}


def harness_overhead(iterations: int = 2000) -> dict:
    """The harness's own per-call cost, measured on a runner that does nothing."""
    x = np.zeros((1, 3, 8, 8), np.float32)
    with NullRunner() as runner:
        stats = time_runner(lambda: runner.infer({"images": x}), 1, warmup_ms=0, warmup_iters=100,
                            duration_s=None, iterations=iterations)
    return {"median_us": stats["median"] * 1e3, "p99_us": stats["p99"] * 1e3, "iterations": iterations}
