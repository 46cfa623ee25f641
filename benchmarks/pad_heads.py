"""Padded heads against today's, in the ONNX Runtime flavour, side by side in one run (issue 36, item 5).

A head size of 18 (mLiT-XXS and S) may cost ONNX Runtime's CPU kernels, whose vectors hold 8 or 16 floats;
`--pad-heads` zero-pads each head to 24 for TensorRT's fused attention. This times the ONNX Runtime flavour's
fp32 (NAME-fp32-ort.onnx, the opset-23 Attention op, which takes padded heads as they are: its head size is
the hidden size over q_num_heads) and INT8 (NAME-int8-ort.onnx) with heads as they are and padded, at each
batch. Rounds alternate between the four artifacts so machine noise hits them alike; each ratio is
padded / unpadded within one round, reported as the median with its quartiles over the rounds.

    python benchmarks/pad_heads.py --size xxs --pad 24 --batches 1,64 --rounds 15 --threads 1
"""
from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from mlit_edge.export import ORT_ATTENTION
from mlit_edge.export.calibration import Recipe
from mlit_edge.export.onnx_export import ORT_SESSION, export_onnx
from mlit_edge.export.source import load_for_export
from mlit_edge.export.variants import Inputs, variant_of
from mlit_edge.runtime.runners import OnnxRuntimeRunner


def artifacts(size: str, pad: int, work: Path) -> dict[str, Path]:
    """fp32-ort and int8-ort of one random-weight model, unpadded and padded, made by the project's own steps."""
    torch.manual_seed(0)
    model, info = load_for_export(None, size, 10, random_weights=True)
    quiet = Inputs(model, Recipe("mnist5k", "train", 256, 0), evaluate=False)
    out = {}
    for tag, pad_to in (("unpadded", None), (f"padded {pad}", pad)):
        fp32 = work / f"{tag.split()[0]}" / "m-fp32-ort.onnx"
        fp32.parent.mkdir()
        rec = export_onnx(model, fp32, info, attention=ORT_ATTENTION, pad_to=pad_to, pad_reason="benchmark")
        assert rec["parity"]["max_abs_err"] <= 1e-4
        out[f"fp32 {tag}"] = fp32
        out[f"int8 {tag}"] = variant_of(fp32, "int8", quiet, runtime="onnxruntime").path
    return out


def time_calls(run: OnnxRuntimeRunner, x: np.ndarray, seconds: float) -> float:
    """Median seconds per call over calls that fill about `seconds`."""
    run.infer({"images": x})
    times = []
    end = time.perf_counter() + seconds
    while time.perf_counter() < end or len(times) < 3:
        t = time.perf_counter()
        run.infer({"images": x})
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def quartiles(values: list[float]) -> tuple[float, float, float]:
    q = statistics.quantiles(values, n=4) if len(values) > 1 else values * 3
    return q[0], statistics.median(values), q[2]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", default="xxs")
    ap.add_argument("--pad", type=int, default=24)
    ap.add_argument("--batches", default="1,64")
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--seconds", type=float, default=0.3, help="per artifact per round")
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    batches = [int(b) for b in args.batches.split(",")]
    with tempfile.TemporaryDirectory() as tmp:
        paths = artifacts(args.size, args.pad, Path(tmp))
        runners = {name: OnnxRuntimeRunner(p, threads=args.threads, session=ORT_SESSION) for name, p in paths.items()}
        for r in runners.values():
            r.__enter__()
        times = {(n, b): [] for n in runners for b in batches}
        rng = np.random.default_rng(0)
        for _ in range(args.rounds):
            for b in batches:
                x = rng.standard_normal((b, 3, 36, 36)).astype(np.float32)
                for name, run in runners.items():
                    times[(name, b)].append(time_calls(run, x, args.seconds))
        for r in runners.values():
            r.__exit__(None, None, None)
    import onnxruntime

    print(f"mLiT-{args.size.upper()}, heads padded to {args.pad}, {args.threads} thread(s), {args.rounds} interleaved "
          f"rounds, onnxruntime {onnxruntime.__version__}")
    print("| precision | batch | unpadded ms/call | padded ms/call | padded / unpadded (median, quartiles) |")
    print("|---|---|---|---|---|")
    for precision in ("fp32", "int8"):
        for b in batches:
            plain, padded = times[(f"{precision} unpadded", b)], times[(f"{precision} padded {args.pad}", b)]
            lo, mid, hi = quartiles([p / u for p, u in zip(padded, plain)])
            print(f"| {precision}-ort | {b} | {statistics.median(plain) * 1e3:.3f} | {statistics.median(padded) * 1e3:.3f}"
                  f" | {mid:.3f} ({lo:.3f}-{hi:.3f}) |")


if __name__ == "__main__":
    main()
