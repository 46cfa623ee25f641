"""The portable fp32 graph on ONNX Runtime (CPU), its last layer for every token against for the dummy token
alone (export/last_token.py), side by side in one run: interleaved repeats at batch 1 and 64, medians and
ratios (the CPU may be shared: read the ratio, measured in the same minutes, rather than the milliseconds).

    python benchmarks/last_layer.py --sizes s,xs,xxs --repeats 7 --threads 2
"""
from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np


def _time(run, x: np.ndarray, calls: int) -> float:
    """Median ms of `calls` runs of one batch (after one warm-up)."""
    run.infer({"images": x})
    times = []
    for _ in range(calls):
        t = time.perf_counter()
        run.infer({"images": x})
        times.append((time.perf_counter() - t) * 1e3)
    return statistics.median(times)


def main() -> None:
    from mlit_edge.export.onnx_export import export_onnx
    from mlit_edge.export.source import load_for_export
    from mlit_edge.model.info import model_stats
    from mlit_edge.runtime.runners import OnnxRuntimeRunner

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="s,xs,xxs")
    ap.add_argument("--batches", default="1,64")
    ap.add_argument("--repeats", type=int, default=7, help="interleaved rounds (each: both graphs, every batch)")
    ap.add_argument("--calls", type=int, default=20, help="timed calls per batch per round (batch 64: a quarter)")
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    batches = [int(b) for b in args.batches.split(",")]
    print(f"ONNX Runtime CPU, {args.threads} threads, {args.repeats} interleaved rounds; medians of round medians")
    print(f"{'size':>4} {'batch':>5} {'all tokens ms':>13} {'dummy alone ms':>14} {'ratio':>6} {'MMACs':>13} "
          f"{'max |dlogit| vs PyTorch':>24}")
    with tempfile.TemporaryDirectory() as tmp:
        for size in args.sizes.split(","):
            model, info = load_for_export(None, size, 10, random_weights=True)
            paths, err = {}, {}
            for pruned in (False, True):  # each export is checked against PyTorch at batch 1 and 8 (or raises)
                paths[pruned] = Path(tmp) / f"{size}-{pruned}.onnx"
                err[pruned] = export_onnx(model, paths[pruned], info, prune_last=pruned)["parity"]["max_abs_err"]
            stats = model_stats(model.cfg)
            rng = np.random.default_rng(0)
            xs = {b: rng.standard_normal((b, 3, 36, 36)).astype(np.float32) for b in batches}
            got: dict = {(p, b): [] for p in (False, True) for b in batches}
            with OnnxRuntimeRunner(paths[False], threads=args.threads) as full, \
                    OnnxRuntimeRunner(paths[True], threads=args.threads) as pruned:
                for r in range(args.repeats):
                    order = (full, pruned) if r % 2 == 0 else (pruned, full)  # neither always goes first
                    for b in batches:
                        for run in order:
                            calls = args.calls if b < 16 else max(3, args.calls // 4)
                            got[(run is pruned, b)].append(_time(run, xs[b], calls))
            for b in batches:
                a, p = statistics.median(got[(False, b)]), statistics.median(got[(True, b)])
                print(f"{size:>4} {b:>5} {a:>13.3f} {p:>14.3f} {p / a:>6.3f} "
                      f"{stats['macs_all_tokens'] / 1e6:>5.1f}->{stats['macs'] / 1e6:<5.1f} "
                      f"{err[False]:>11.1e} / {err[True]:.1e}")


if __name__ == "__main__":
    main()
