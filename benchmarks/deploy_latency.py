"""Inference latency of every deploy stage of one model, side by side in one run.

Stages: the PyTorch eager model with the per-expert dispatch MoE (the sparse reference), PyTorch
`to_deploy`, and ONNX Runtime on the fp32, fp16 and INT8 exports. Rounds alternate between stages so
machine noise hits them alike. Achieved GFLOP/s uses the analytic MACs of `mlit-edge info`
(2 FLOPs per MAC, dense MoE form).

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

from mlit_edge.export.static import to_deploy
from mlit_edge.export.onnx_export import export_onnx
from mlit_edge.export.source import load_for_export
from mlit_edge.model.info import model_stats
from mlit_edge.export.precision import to_fp16, to_int8
from mlit_edge.export.torch_runner import TorchRunner
from mlit_edge.runtime.runners import OnnxRuntimeRunner


class SparseReference(torch.nn.Module):
    """The training model's eval forward with the per-expert dispatch MoE."""

    def __init__(self, model) -> None:
        super().__init__()
        self.model = model

    def forward(self, x):
        return self.model(x, sparse=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", default="xxs")
    ap.add_argument("--checkpoint", default=None)
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
    onnx32 = work / "m.onnx"
    export_onnx(model, onnx32, info)
    to_fp16(onnx32, work / "m.fp16.onnx")
    rng = np.random.default_rng(0)
    calib = rng.standard_normal((64, 3, 36, 36)).astype(np.float32)
    to_int8(onnx32, work / "m.int8.onnx", calib, {"name": "gaussian noise (latency only)"})
    shape = (None, model.cfg.in_chans, model.cfg.img_size, model.cfg.img_size)
    stages = {
        "torch eager, sparse MoE": TorchRunner(SparseReference(model), ["logits"], shape, threads=args.threads),
        "torch to_deploy": TorchRunner(to_deploy(model), ["logits"], shape, threads=args.threads),
        "onnxruntime fp32": OnnxRuntimeRunner(onnx32, threads=args.threads),
        "onnxruntime fp16": OnnxRuntimeRunner(work / "m.fp16.onnx", threads=args.threads),
        "onnxruntime int8": OnnxRuntimeRunner(work / "m.int8.onnx", threads=args.threads),
    }
    for r in stages.values():
        r.open()
    results = []
    for batch in [int(b) for b in args.batches.split(",")]:
        feed = {"images": rng.standard_normal((batch, 3, 36, 36)).astype(np.float32)}
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
        base = statistics.median(times["torch eager, sparse MoE"])
        for name, t in times.items():
            med = statistics.median(t)
            results.append({"stage": name, "batch": batch, "median_ms": med * 1e3,
                            "p90_ms": float(np.percentile(t, 90)) * 1e3, "img_per_s": batch / med,
                            "gflops": 2 * macs * batch / med / 1e9, "speedup_vs_eager": base / med,
                            "calls": len(t)})
    for r in stages.values():
        r.close()

    print(f"mLiT-{(info['model']['size'] or '?').upper()} inference, {macs / 1e6:.1f}M MACs/image, "
          f"{args.threads} threads, {platform.machine()}, torch {torch.__version__}")
    print(f"{'stage':<26}{'batch':>6}{'median ms':>11}{'p90 ms':>9}{'img/s':>9}{'GFLOP/s':>9}{'vs eager':>9}")
    for r in results:
        print(f"{r['stage']:<26}{r['batch']:>6}{r['median_ms']:>11.2f}{r['p90_ms']:>9.2f}{r['img_per_s']:>9.0f}"
              f"{r['gflops']:>9.1f}{r['speedup_vs_eager']:>8.2f}x")
    if args.json:
        Path(args.json).write_text(json.dumps({"size": info["model"]["size"], "macs": macs, "threads": args.threads,
                                               "results": results}, indent=2))


if __name__ == "__main__":
    main()
