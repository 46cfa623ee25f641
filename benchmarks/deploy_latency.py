"""Inference speed of every deploy stage, precision and attention form of one model, side by side in one run.

Stages: the eager model with the per-expert dispatch MoE (the sparse reference), the eager model
(dense MoE), `to_deploy` in PyTorch; ONNX Runtime on the portable fp32 export (the graph of earlier
releases), on each fused-attention form of the ONNX Runtime flavour (`export.ATTENTION_FORMS`: the one
`--target onnxruntime` builds, NAME-fp32-ort.onnx, and the other two), on the fp16 variant, the INT8 QDQ
made for TensorRT, the INT8 for ONNX Runtime made from the fused graph (NAME-int8-ort.onnx) and from the
portable one (the previous release's int8-ort); and OpenVINO's CPU plugin on the portable fp32 ONNX, with
f32 and with its default precision hint (bf16 where the CPU has it), compiled for each batch's static shape
as an OpenVINO deployment would be. All artifacts are made by the project's own build steps. Rounds
alternate between stages so machine noise hits them alike. The sgemm peak of this run (torch matmul, n =
1024 and 2048) is the yardstick: achieved GFLOP/s use the analytic MACs of `mlit-edge info` (2 FLOPs per
MAC, dense MoE form). The goals of the ONNX Runtime flavour are checked at the end, and `--profile` adds
ONNX Runtime's own profile (by op) of the portable and fused graphs.

    python benchmarks/deploy_latency.py --checkpoint pretrained:xxs-mnist5k --batches 1,64 [--profile]
"""
from __future__ import annotations

import argparse
import collections
import json
import platform
import statistics
import tempfile
import time
from pathlib import Path
from typing import Mapping

import numpy as np
import torch

from mlit_edge.export import ATTENTION_FORMS, ORT_ATTENTION
from mlit_edge.export.calibration import Recipe
from mlit_edge.export.onnx_export import ORT_SESSION, export_onnx
from mlit_edge.export.source import load_for_export
from mlit_edge.export.static import to_deploy
from mlit_edge.export.torch_runner import TorchRunner
from mlit_edge.export.variants import Inputs, variant_of
from mlit_edge.model.info import model_stats
from mlit_edge.runtime.runners import OnnxRuntimeRunner, Runner, predict_all

TODAY = "onnxruntime fp32, portable"  # the graph the goals are measured against
FUSED = f"onnxruntime fp32-ort ({ORT_ATTENTION})"
INT8_FUSED, INT8_TODAY = "onnxruntime int8-ort (fused)", "onnxruntime int8-ort, portable"


class SparseReference(torch.nn.Module):
    """The training model's eval forward with the per-expert dispatch MoE."""

    def __init__(self, model) -> None:
        super().__init__()
        self.model = model

    def forward(self, x):
        return self.model(x, sparse=True)


class OpenVINORunner(Runner):
    """An ONNX file through OpenVINO's CPU plugin, compiled once per input shape (static shapes, as an
    OpenVINO deployment compiles them). `hint`: the inference precision ("f32"), or None for the plugin's
    default (bf16 on CPUs with AVX512-BF16 or AMX)."""

    name = "openvino"

    def __init__(self, path: Path, threads: int, hint: str | None) -> None:
        super().__init__()
        self.path, self.threads, self.hint = path, threads, hint
        self._requests: dict[tuple, object] = {}

    def activate_impl(self) -> None:
        import openvino

        self._core = openvino.Core()
        self.input_names, self.input_shape, self.output_names = ["images"], (None, 3, 0, 0), ["logits"]
        config = {"INFERENCE_NUM_THREADS": self.threads, "PERFORMANCE_HINT": "LATENCY"}
        if self.hint:
            config["INFERENCE_PRECISION_HINT"] = self.hint
        self._config = config

    def infer_impl(self, feed: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        x = feed["images"]
        request = self._requests.get(x.shape)
        if request is None:
            model = self._core.read_model(str(self.path))
            model.reshape({"images": list(x.shape)})
            compiled = self._core.compile_model(model, "CPU", self._config)
            self.settings = {"precision": str(compiled.get_property("INFERENCE_PRECISION_HINT"))}
            request = self._requests[x.shape] = compiled.create_infer_request()
        return {"logits": request.infer({0: x})[0]}


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


def ort_profile(path: Path, batch: int, threads: int, calls: int, top: int = 8) -> list[tuple[str, float, float]]:
    """ONNX Runtime's own profile of `path` at `batch`: (op, share of kernel time, µs per call) of the
    `top` ops, from `SessionOptions.enable_profiling` (profiling adds its own overhead to every node)."""
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads, opts.enable_profiling, opts.log_severity_level = threads, True, 3
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
    opts.profile_file_prefix = str(Path(tempfile.mkdtemp(prefix="mlit-prof-")) / "ort")
    session = ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])
    x = np.random.default_rng(0).standard_normal((batch, 3, *session.get_inputs()[0].shape[2:])).astype(np.float32)
    for _ in range(calls):
        session.run(None, {"images": x})
    events = json.loads(Path(session.end_profiling()).read_text())
    by_op: collections.Counter = collections.Counter()
    for e in events:
        if e.get("cat") == "Node" and e.get("name", "").endswith("_kernel_time"):
            by_op[e["args"]["op_name"]] += e["dur"]
    total = sum(by_op.values()) or 1
    return [(op, 100 * us / total, us / calls) for op, us in by_op.most_common(top)]


def build_stages(model, info: dict, work: Path, threads: int, openvino: bool) -> tuple[dict, dict]:
    """The runners of every stage (not yet open) and the records of the artifacts they run."""
    fp32 = work / "m-fp32.onnx"
    records = {TODAY: export_onnx(model, fp32, info)}
    forms = {}
    for form in ATTENTION_FORMS:
        forms[form] = work / f"m-fp32-{form}.onnx"
        records[FUSED if form == ORT_ATTENTION else f"onnxruntime fp32, {form}"] = export_onnx(model, forms[form], info,
                                                                                               attention=form)
    recipe = Recipe(info["preprocess"]["dataset"] or "mnist5k", "train", 512, 0)
    quiet = Inputs(model, recipe, evaluate=False)  # its progress lines are not shown (no handler)
    variants = {"onnxruntime fp16": variant_of(fp32, "fp16", quiet),
                "onnxruntime int8 (TensorRT QDQ)": variant_of(fp32, "int8", quiet),
                INT8_FUSED: variant_of(forms[ORT_ATTENTION], "int8", quiet, runtime="onnxruntime"),
                INT8_TODAY: variant_of(fp32, "int8", quiet, runtime="onnxruntime")}
    records.update({name: v.record.to_json() for name, v in variants.items()})
    shape = (None, model.cfg.in_chans, model.cfg.img_size, model.cfg.img_size)
    ort = {"threads": threads, "session": ORT_SESSION}
    stages: dict[str, Runner] = {
        "torch eager, sparse MoE": TorchRunner(SparseReference(model), ["logits"], shape, threads=threads),
        "torch eager, dense MoE": TorchRunner(model, ["logits"], shape, threads=threads),
        "torch to_deploy": TorchRunner(to_deploy(model), ["logits"], shape, threads=threads),
        TODAY: OnnxRuntimeRunner(fp32, **ort),
        **{name: OnnxRuntimeRunner(forms[form], **ort) for form in ATTENTION_FORMS
           for name in [FUSED if form == ORT_ATTENTION else f"onnxruntime fp32, {form}"]},
        **{name: OnnxRuntimeRunner(v.path, **ort) for name, v in variants.items()},
    }
    if openvino:
        stages["openvino f32"] = OpenVINORunner(fp32, threads, "f32")
        stages["openvino default hint"] = OpenVINORunner(fp32, threads, None)
    return stages, records


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", default="xxs")
    ap.add_argument("--checkpoint", default=None, help="a trained checkpoint: also reports top-1 on its test split")
    ap.add_argument("--batches", default="1,64")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--min-time", type=float, default=0.5, help="seconds of timed calls per stage per round")
    ap.add_argument("--threads", type=int, default=torch.get_num_threads())
    ap.add_argument("--profile", action="store_true", help="ONNX Runtime's profile of the portable and fused graphs")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()

    try:
        import openvino
    except ImportError:
        openvino = None
        print("note: openvino is not installed (pip install 'mlit-edge[bench]'): its rows are left out")
    torch.set_num_threads(args.threads)
    model, info = load_for_export(args.checkpoint, None if args.checkpoint else args.size)
    macs = model_stats(model.cfg)["macs"]
    work = Path(tempfile.mkdtemp(prefix="mlit-bench-"))
    stages, records = build_stages(model, info, work, args.threads, openvino is not None)
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
        feed = {"images": np.random.default_rng(0).standard_normal((batch, *model_shape(model))).astype(np.float32)}
        times: dict[str, list[float]] = {name: [] for name in stages}
        for r in stages.values():  # warm-up (and OpenVINO's compile for this shape)
            r.infer(feed)
            r.infer(feed)
        for _ in range(args.rounds):
            for name, r in stages.items():
                end = time.perf_counter() + args.min_time
                while time.perf_counter() < end:
                    t0 = time.perf_counter()
                    r.infer(feed)
                    times[name].append(time.perf_counter() - t0)
        today = statistics.median(times[TODAY])
        for name, t in times.items():
            med = statistics.median(t)
            gflops = 2 * macs * batch / med / 1e9
            results.append({"stage": name, "batch": batch, "median_ms": med * 1e3, "img_per_s": batch / med,
                            "gflops": gflops, "pct_peak": 100 * gflops / best, "vs_today": today / med,
                            "calls": len(t), "top1": top1.get(name)})
    for r in stages.values():
        r.close()

    import onnxruntime

    print(f"mLiT-{(info['model']['size'] or '?').upper()} inference, {macs / 1e6:.1f}M MACs/image, {args.threads} "
          f"threads, {platform.machine()} {cpu_name()}, torch {torch.__version__}, onnxruntime {onnxruntime.__version__}"
          + (f", openvino {openvino.__version__.split('-')[0]}" if openvino else ""))
    print("sgemm peak of this run (torch fp32 matmul): " + ", ".join(f"n={n} {g:.1f}" for n, g in peak.items())
          + f" GFLOP/s; % peak below is of {best:.1f}; 'vs today' is against {TODAY!r}")
    print(f"{'stage':<36}{'batch':>6}{'median ms':>11}{'img/s':>8}{'GFLOP/s':>9}{'% peak':>8}{'vs today':>10}"
          + ("   top-1" if top1 else ""))
    for r in results:
        print(f"{r['stage']:<36}{r['batch']:>6}{r['median_ms']:>11.2f}{r['img_per_s']:>8.0f}{r['gflops']:>9.1f}"
              f"{r['pct_peak']:>7.1f}%{r['vs_today']:>9.2f}x" + (f"  {r['top1']:.4f}" if top1 else ""))
    goals = report_goals(results, records, top1, int8_routing(model, info, stages, (INT8_FUSED, INT8_TODAY)))
    profiles = {}
    if args.profile:
        for name, path in ((TODAY, work / "m-fp32.onnx"), (FUSED, work / f"m-fp32-{ORT_ATTENTION}.onnx")):
            for batch in sorted({r["batch"] for r in results}):
                rows = ort_profile(path, batch, args.threads, calls=20 if batch > 8 else 200)
                profiles[f"{name}, batch {batch}"] = rows
                print(f"profile of {name}, batch {batch} (share of kernel time, µs per call): "
                      + ", ".join(f"{op} {share:.1f}% {us:.0f}" for op, share, us in rows))
    if args.json:
        Path(args.json).write_text(json.dumps({"size": info["model"]["size"], "macs": macs, "threads": args.threads,
                                               "sgemm_gflops": peak, "results": results, "goals": goals,
                                               "profiles": profiles}, indent=2))


def model_shape(model) -> tuple[int, int, int]:
    return model.cfg.in_chans, model.cfg.img_size, model.cfg.img_size


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return f"({line.split(':', 1)[1].strip()})"
    except OSError:
        pass
    return ""


def int8_routing(model, info: dict, stages: dict, names: tuple[str, ...]) -> dict[str, list[float]]:
    """Per layer, the share of tokens of 1000 held-out images that keep PyTorch's experts in each INT8
    artifact of `names`, on the same tokens for all: the last layer on the dummy token alone."""
    from mlit_edge.export.onnx_export import reference_outputs
    from mlit_edge.base.routing import routing_agreement
    from mlit_edge.train.data import sample_images

    images, _ = sample_images(info["preprocess"]["dataset"] or "mnist5k", "test", 1000)
    _, ref_routes, _ = reference_outputs(model, images)
    out = {}
    for name in names:
        with OnnxRuntimeRunner(stages[name].path, session=ORT_SESSION, expose_routing=True) as run:
            _, routes = predict_all(run, images, routes=True)
        routes[-1] = routes[-1][:, -1:]  # the dummy token: what the fused graph's last layer routes
        out[name] = routing_agreement(routes, ref_routes)
    return out


def report_goals(results: list[dict], records: dict, top1: dict, routing: dict) -> list[dict]:
    """The ONNX Runtime flavour's goals (issue 26), each measured in this run: PASS or MISS with the figure."""
    at = {(r["stage"], r["batch"]): r for r in results}
    batches = sorted({r["batch"] for r in results})
    goals = []

    def goal(text: str, value: float, target: float, higher: bool, unit: str = "x") -> None:
        ok = value >= target if higher else value <= target
        goals.append({"goal": text, "value": value, "target": target, "pass": ok})
        print(f"  {'PASS' if ok else 'MISS'}  {text}: {value:.2f}{unit} ({'>=' if higher else '<='} {target}{unit})")

    print("goals of the ONNX Runtime flavour, measured above:")
    big, one = max(batches), min(batches)
    goal(f"fp32 fused vs today's graph, batch {big} throughput", at[(FUSED, big)]["vs_today"], 1.4, True)
    goal(f"fp32 fused vs torch eager (dense MoE), batch {big} throughput",
         at[(FUSED, big)]["img_per_s"] / at[("torch eager, dense MoE", big)]["img_per_s"], 1.0, True)
    goal(f"fp32 fused time vs today's graph, batch {one}", 1 / at[(FUSED, one)]["vs_today"], 0.7, False)
    goal(f"int8-ort (fused) vs today's fp32, batch {big} throughput", at[(INT8_FUSED, big)]["vs_today"], 1.5, True)
    if top1:
        goal("int8-ort (fused) top-1 change vs fp32", 100 * abs(top1[INT8_FUSED] - top1[TODAY]), 0.5, False, " pt")
    fused_routes, today_routes = routing[INT8_FUSED], routing[INT8_TODAY]
    goal("int8-ort (fused) per-layer routing agreement minus today's int8-ort, worst layer",
         min(a - b for a, b in zip(fused_routes, today_routes)), 0.0, True, "")
    print("  routing agreement per layer with PyTorch on 1000 held-out images (the last layer on the dummy token, "
          "the only one the fused graph routes there):")
    print(f"    int8-ort fused: {', '.join(f'{a:.3f}' for a in fused_routes)}")
    print(f"    int8-ort today: {', '.join(f'{a:.3f}' for a in today_routes)} (its last layer on every token: "
          f"{records[INT8_TODAY]['parity']['routing_agreement'][-1]:.3f})")
    ort_rows = [r for r in results if r["stage"].startswith("onnxruntime")]
    for batch in batches:
        best = max((r for r in ort_rows if r["batch"] == batch), key=lambda r: r["img_per_s"])
        for name in ("openvino f32", "openvino default hint"):
            if (name, batch) in at:
                ratio = at[(name, batch)]["img_per_s"] / best["img_per_s"]
                print(f"  {name} vs the best ONNX Runtime artifact ({best['stage']}), batch {batch}: {ratio:.2f}x"
                      " (a build target at >= 1.3x in two runs)")
    return goals


if __name__ == "__main__":
    main()
