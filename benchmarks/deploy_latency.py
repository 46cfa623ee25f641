"""Inference speed of every deploy stage and precision of one model, side by side in one run.

Stages: the eager model with the per-expert dispatch MoE (the sparse reference), the eager model
(dense MoE), `to_deploy` in PyTorch, and ONNX Runtime on the fp32 export, its fp16 variant, the
INT8 QDQ made for TensorRT and the INT8 made for ONNX Runtime (`--target onnxruntime`), all made by
the project's own build steps. Rounds alternate between stages so machine noise hits them alike.
The sgemm peak of this run (torch matmul, n = 1024 and 2048) is the yardstick: achieved GFLOP/s
use the analytic MACs of `mlit-edge info` (2 FLOPs per MAC, dense MoE form).

    python benchmarks/deploy_latency.py --size xxs --batches 1,64 [--checkpoint runs/.../checkpoint.pt]
"""
from __future__ import annotations

import argparse
import json
import platform
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from mlit_edge.export.calibration import Recipe
from mlit_edge.export.onnx_export import ORT_SESSION, export_onnx
from mlit_edge.export.source import load_for_export
from mlit_edge.export.static import to_deploy
from mlit_edge.export.torch_runner import TorchRunner
from mlit_edge.export.variants import make_variant
from mlit_edge.model.info import model_stats
from mlit_edge.runtime.runners import OnnxRuntimeRunner, predict_all


class SparseReference(torch.nn.Module):
    """The training model's eval forward with the per-expert dispatch MoE."""

    def __init__(self, model) -> None:
        super().__init__()
        self.model = model

    def forward(self, x):
        return self.model(x, sparse=True)


def sgemm_peak(seconds: float = 1.5) -> dict:
    """GFLOP/s of torch's fp32 matmul on square matrices, the best of n = 1024 and 2048."""
    out = {}
    for n in (1024, 2048):
        a, b = torch.randn(n, n), torch.randn(n, n)
        for _ in range(3):
            a @ b
        calls, start = 0, time.perf_counter()
        while time.perf_counter() - start < seconds:
            a @ b
            calls += 1
        out[n] = 2 * n ** 3 * calls / (time.perf_counter() - start) / 1e9
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", default="xxs")
    ap.add_argument("--checkpoint", default=None, help="a trained checkpoint: also reports top-1 on its test split")
    ap.add_argument("--batches", default="1,64")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--min-time", type=float, default=0.5, help="seconds of timed calls per stage per round")
    ap.add_argument("--threads", type=int, default=torch.get_num_threads())
    ap.add_argument("--json", default=None)
    args = ap.parse_args()

    torch.set_num_threads(args.threads)
    model, info = load_for_export(args.checkpoint, None if args.checkpoint else args.size)
    macs = model_stats(model.cfg)["macs"]
    work = Path(tempfile.mkdtemp(prefix="mlit-bench-"))
    fp32 = work / "m-fp32.onnx"
    export_onnx(model, fp32, info)
    recipe = Recipe(info["preprocess"]["dataset"] or "mnist5k", "train", 512, 0)
    quiet = {"model": model, "recipe": recipe, "evaluate": False}  # its progress lines are not shown (no handler)
    fp16 = make_variant(fp32, "fp16", **quiet).path
    int8_trt = make_variant(fp32, "int8", **quiet).path
    int8_ort = make_variant(fp32, "int8", runtime="onnxruntime", **quiet).path
    shape = (None, model.cfg.in_chans, model.cfg.img_size, model.cfg.img_size)
    ort = {"threads": args.threads, "session": ORT_SESSION}
    stages = {
        "torch eager, sparse MoE": TorchRunner(SparseReference(model), ["logits"], shape, threads=args.threads),
        "torch eager, dense MoE": TorchRunner(model, ["logits"], shape, threads=args.threads),
        "torch to_deploy": TorchRunner(to_deploy(model), ["logits"], shape, threads=args.threads),
        "onnxruntime fp32": OnnxRuntimeRunner(fp32, **ort),
        "onnxruntime fp16": OnnxRuntimeRunner(fp16, **ort),
        "onnxruntime int8 (TensorRT QDQ)": OnnxRuntimeRunner(int8_trt, **ort),
        "onnxruntime int8-ort": OnnxRuntimeRunner(int8_ort, **ort),
    }
    for r in stages.values():
        r.open()
    top1 = {}
    if args.checkpoint:
        from mlit_edge.train.data import load_dataset

        test = load_dataset(info["preprocess"]["dataset"], "test")
        labels = test.labels.numpy()
        top1 = {name: float((predict_all(r, test.inputs())[0].argmax(1) == labels).mean())
                for name, r in stages.items()}
    peak = sgemm_peak()
    best = max(peak.values())
    results = []
    for batch in [int(b) for b in args.batches.split(",")]:
        feed = {"images": np.random.default_rng(0).standard_normal((batch, *shape[1:])).astype(np.float32)}
        times: dict[str, list[float]] = {name: [] for name in stages}
        for r in stages.values():  # warm-up
            r.infer(feed)
        for _ in range(args.rounds):
            for name, r in stages.items():
                end = time.perf_counter() + args.min_time
                while time.perf_counter() < end:
                    t0 = time.perf_counter()
                    r.infer(feed)
                    times[name].append(time.perf_counter() - t0)
        fp32_med = statistics.median(times["onnxruntime fp32"])
        for name, t in times.items():
            med = statistics.median(t)
            gflops = 2 * macs * batch / med / 1e9
            results.append({"stage": name, "batch": batch, "median_ms": med * 1e3, "img_per_s": batch / med,
                            "gflops": gflops, "pct_peak": 100 * gflops / best, "vs_onnxruntime_fp32": fp32_med / med,
                            "calls": len(t), "top1": top1.get(name)})
    for r in stages.values():
        r.close()

    import onnxruntime

    print(f"mLiT-{(info['model']['size'] or '?').upper()} inference, {macs / 1e6:.1f}M MACs/image, {args.threads} "
          f"threads, {platform.machine()}, torch {torch.__version__}, onnxruntime {onnxruntime.__version__}")
    print("sgemm peak of this run (torch fp32 matmul): " + ", ".join(f"n={n} {g:.1f}" for n, g in peak.items())
          + f" GFLOP/s; % peak below is of {best:.1f}")
    print(f"{'stage':<32}{'batch':>6}{'median ms':>11}{'img/s':>8}{'GFLOP/s':>9}{'% peak':>8}{'vs ORT fp32':>12}"
          + ("   top-1" if top1 else ""))
    for r in results:
        print(f"{r['stage']:<32}{r['batch']:>6}{r['median_ms']:>11.2f}{r['img_per_s']:>8.0f}{r['gflops']:>9.1f}"
              f"{r['pct_peak']:>7.1f}%{r['vs_onnxruntime_fp32']:>11.2f}x" + (f"  {r['top1']:.4f}" if top1 else ""))
    for batch in sorted({r["batch"] for r in results}):
        by = {r["stage"]: r for r in results if r["batch"] == batch}
        print(f"INT8/FP32 throughput on ONNX Runtime, batch {batch}: int8-ort "
              f"{by['onnxruntime int8-ort']['vs_onnxruntime_fp32']:.2f}x, TensorRT QDQ "
              f"{by['onnxruntime int8 (TensorRT QDQ)']['vs_onnxruntime_fp32']:.2f}x")
    if args.json:
        Path(args.json).write_text(json.dumps({"size": info["model"]["size"], "macs": macs, "threads": args.threads,
                                               "sgemm_gflops": peak, "results": results}, indent=2))


if __name__ == "__main__":
    main()
