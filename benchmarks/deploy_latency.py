"""Speed and fidelity of every CPU deploy stage of one model, each in its own process, and issue 49's goals.
All are timed side by side in one run; the goals are printed as PASS/MISS lines with their figures.

Stages: PyTorch (eager with the per-expert dispatch MoE, eager dense, `to_deploy`); ONNX Runtime on the portable
fp32 export, on the fp32 graph `--target onnxruntime` builds (and, without --quick, the other fused-attention
forms), on the fp16 and INT8 QDQ made for TensorRT and on int8-ort (beside it the dynamic int8-ort it replaced,
made again by int8_ort_batch.dynamic_int8, as a reference); OpenVINO on the portable fp32 ONNX with f32 and with its default hint
(bf16 where the CPU has it: the yardstick), compiled per batch; and each precision of the `openvino` target where
the target table has that row. Every artifact is made by the project's own build steps (`run_export`, `run_build`).

Each stage's worker process (benchmarks/_stage_worker.py) loads its artifact once and holds only its own runtime;
the parent asks one worker at a time for a round, rotating the order every round. Latency is p50 and mean per
call; throughput and GFLOP/s are at p50 (2 FLOPs per analytic MAC, dense MoE form), against this run's sgemm peak
(torch fp32 matmul). Fidelity is against the PyTorch model on the test split: top-1, prediction agreement, max abs
logit error, per-layer routing agreement. `--profile` adds ONNX Runtime's profile of the portable and fused graphs.

    python benchmarks/deploy_latency.py --checkpoint pretrained:xxs-mnist5k --batches 1,64 --threads 2 --json out.json
    python benchmarks/deploy_latency.py --quick   (short rounds at batches 1 and 8: proves it runs, no figures)
"""
from __future__ import annotations

import argparse
import importlib.metadata
import importlib.util
import json
import platform
import statistics
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from _stage_worker import StageProcess, time_rounds  # beside this script
from int8_ort_batch import dynamic_int8
from mlit_edge import __version__
from mlit_edge.artifacts.targets import FLAVOURS, ORT_ATTENTION, TABLE
from mlit_edge.base.routing import routing_agreement
from mlit_edge.engine.build import BuildRequest, run_build
from mlit_edge.export import ATTENTION_FORMS
from mlit_edge.export.onnx_export import export_onnx, reference_outputs
from mlit_edge.export.pipeline import run_export
from mlit_edge.export.requests import ExportRequest
from mlit_edge.export.source import load_for_export
from mlit_edge.model.info import model_stats
from mlit_edge.train.data import load_dataset

MAKER = FLAVOURS[("int8", "onnxruntime")].maker  # how the build makes int8-ort
PORTABLE, FUSED = "onnxruntime fp32, portable", f"onnxruntime fp32-ort ({ORT_ATTENTION} attention)"
INT8_QDQ, INT8_ORT = "onnxruntime int8 (TensorRT QDQ)", f"onnxruntime int8-ort ({MAKER})"
DYNAMIC = "onnxruntime int8-ort, dynamic (reference)"
OV_F32, OV_DEFAULT = "openvino f32, portable ONNX", "openvino default hint, portable ONNX"
FLAGS = ("avx512f", "avx512_vnni", "avx512_bf16", "amx_tile", "amx_bf16", "amx_int8", "avx_vnni")
ROUTING_GOAL = 0.98  # issue 49: worst-layer expert agreement of both INT8 flavours


@dataclass(frozen=True)
class Stage:
    name: str
    spec: dict  # what its worker opens (benchmarks/_stage_worker.py)
    ours: bool = False  # an artifact a build target makes: a candidate for "our best CPU artifact"


def build(source: dict, target: str, precision: str, work: Path) -> Path:
    """`mlit-edge build --target TARGET --precision PRECISION` into work/TARGET: the artifact's path."""
    req = BuildRequest(**source, target=target, precision=precision, out=str(work / target), evaluate=False)
    return run_build(req).artifact


def build_stages(args, model, info: dict, work: Path) -> list[Stage]:
    """Every stage, its artifact made first by the project's own build steps."""
    source = {"checkpoint": args.checkpoint, "size": None if args.checkpoint else args.size}
    threads = {"threads": args.threads}

    def artifact(name: str, path: Path, ours: bool = True) -> Stage:
        return Stage(name, {"kind": "artifact", "path": str(path), **threads}, ours)

    print("building the artifacts (mlit-edge export, mlit-edge build) ...", flush=True)
    fp32, fp16, int8 = run_export(ExportRequest(**source, out=str(work / "m.onnx"), precisions=("fp32", "fp16", "int8"),
                                                evaluate=False))
    fused = build(source, "onnxruntime", "fp32", work)
    stages = [Stage(f"torch {title}", {"kind": "torch", "form": form, **source, **threads}) for form, title in
              (("sparse", "eager, sparse MoE"), ("dense", "eager, dense MoE"), ("deploy", "to_deploy"))]
    stages += [artifact(PORTABLE, fp32), artifact(FUSED, fused)]
    for form in [] if args.quick else [f for f in ATTENTION_FORMS if f != ORT_ATTENTION]:
        export_onnx(model, work / f"m-fp32-{form}.onnx", info, attention=form)
        stages.append(artifact(f"onnxruntime fp32, {form} attention", work / f"m-fp32-{form}.onnx", ours=False))
    stages += [artifact("onnxruntime fp16", fp16), artifact(INT8_QDQ, int8),
               artifact(INT8_ORT, build(source, "onnxruntime", "int8", work))]
    stages.append(artifact(DYNAMIC, dynamic_int8(fused), ours=False))
    if importlib.util.find_spec("openvino") is None:
        print("note: openvino is not installed (pip install 'mlit-edge[bench]'): its stages are left out")
        return stages
    stages += [Stage(OV_F32, {"kind": "openvino", "path": str(fp32), "hint": "f32", **threads}),
               Stage(OV_DEFAULT, {"kind": "openvino", "path": str(fp32), "hint": None, **threads})]
    if "openvino" not in TABLE:
        print("note: the target table has no openvino row (mlit-edge build --target openvino): no stage of ours for it")
    for precision in TABLE["openvino"].precisions if "openvino" in TABLE else ():
        try:
            stages.append(artifact(f"openvino target {precision}", build(source, "openvino", precision, work)))
        except Exception as e:  # one target's failure leaves the others' figures standing, and says why
            print(f"note: mlit-edge build --target openvino --precision {precision} failed, its stage is left out: "
                  f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")
    return stages


def sgemm_peak(seconds: float) -> dict:
    """GFLOP/s of torch's fp32 matmul on square matrices, at n = 1024 and 2048."""
    out = {}
    for n in (1024, 2048):
        a, b = torch.randn(n, n), torch.randn(n, n)
        a @ b  # the first call allocates and packs
        calls, start = 0, time.perf_counter()
        while time.perf_counter() - start < seconds:
            a @ b
            calls += 1
        out[n] = 2 * n ** 3 * calls / (time.perf_counter() - start) / 1e9
    return out


def fidelity(workers: dict, model, images: np.ndarray, labels: np.ndarray, norm) -> dict[str, dict]:
    """Per stage, how it computes against the eval-mode PyTorch model on `images`."""
    ref_logits, ref_routes, _ = reference_outputs(model, images)
    out = {}
    for name, worker in workers.items():
        logits, routes = worker.call("predict", images, norm, True)
        out[name] = {"top1": float((logits.argmax(1) == labels).mean()),
                     "agreement": float((logits.argmax(1) == ref_logits.argmax(1)).mean()),
                     "max_abs_err": float(np.abs(logits - ref_logits).max()),
                     "routing": routing_agreement(routes, ref_routes) if routes else None}
    return out


def machine(settings: dict) -> dict:
    """What the figures depend on: the CPU, its flags that matter, OpenVINO's view of it, versions, commit."""
    cpuinfo = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    first = cpuinfo.split("\n\n")[0].splitlines()  # the first processor's block
    fields = {k.strip(): v.strip() for k, v in (line.split(":", 1) for line in first if ":" in line)}
    git = ["git", "-C", str(Path(__file__).parent)]
    commit, dirty = (subprocess.run(git + a, capture_output=True, text=True).stdout.strip()
                     for a in (["rev-parse", "HEAD"], ["status", "--porcelain", "-uno"]))
    versions = {"python": platform.python_version(), "mlit_edge": __version__, "torch": torch.__version__,
                **{d: importlib.metadata.version(d) for d in ("onnxruntime", "openvino") if importlib.util.find_spec(d)}}
    ov = settings.get(OV_DEFAULT, {})
    return {"cpu": fields.get("model name", platform.processor()), "arch": platform.machine(),
            "flags": {f: f in fields.get("flags", "").split() for f in FLAGS},
            "openvino_capabilities": ov.get("capabilities"), "openvino_default_precision": ov.get("precision"),
            "versions": versions, "commit": commit + (" + uncommitted changes" if dirty else "")}


def report_goals(results: list[dict], fid: dict, stages: list[Stage]) -> list[dict]:
    """Issue 49's goals, each measured in this run: PASS or MISS with the figure (n/a, with why, where this
    run cannot measure it)."""
    at = {(r["stage"], r["batch"]): r for r in results}
    batches = sorted({r["batch"] for r in results})
    goals = []

    def goal(text: str, value: float | None, target: float, why: str = "") -> None:
        ok = None if value is None else value >= target
        goals.append({"goal": text, "value": value, "target": target, "pass": ok, "why": why if ok is None else None})
        print(f"  {'n/a ' if ok is None else 'PASS' if ok else 'MISS'}  {text}: "
              + (why if value is None else f"{value:.3f} (>= {target})"))

    print("issue 49's goals, measured above (speed: images/s at p50, side by side in this run):")
    ours = [s.name for s in stages if s.ours]
    for batch in batches:
        best = max((at[(n, batch)] for n in ours), key=lambda r: r["img_per_s"])
        ov = at.get((OV_DEFAULT, batch))
        goal(f"(a) our best CPU artifact ({best['stage']}) vs {OV_DEFAULT}, batch {batch}",
             best["img_per_s"] / ov["img_per_s"] if ov else None, 1.0, "openvino is not installed")
    for batch in batches:
        dyn = at.get((DYNAMIC, batch))
        goal(f"(b) {INT8_ORT} vs today's dynamic int8-ort, batch {batch}",
             at[(INT8_ORT, batch)]["img_per_s"] / dyn["img_per_s"] if dyn else None, 1.0,
             "the dynamic reference was not timed")
    for name in (INT8_QDQ, INT8_ORT):
        routing = (fid.get(name) or {}).get("routing")
        worst = int(np.argmin(routing)) if routing else None
        goal(f"(c) worst-layer routing agreement with PyTorch, {name}" + (f" (layer {worst})" if routing else ""),
             routing[worst] if routing else None, ROUTING_GOAL, "no test split to measure it on (no dataset recorded)")
    for name in (n for n in fid if "int8" in n and fid[n]["routing"]):
        print(f"    routing agreement per layer, {name}: {', '.join(f'{a:.3f}' for a in fid[name]['routing'])}")
    return goals


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", default="xxs", help="without --checkpoint: the size's pretrained model, else random")
    ap.add_argument("--checkpoint", default=None)
    ap.add_argument("--batches", default="1,64")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--min-time", type=float, default=0.5, help="seconds of timed calls per stage per round")
    ap.add_argument("--settle", type=float, default=0.1, help="seconds of quiet before each stage's round")
    ap.add_argument("--images", type=int, default=1000, help="test images for the fidelity columns")
    ap.add_argument("--threads", type=int, default=torch.get_num_threads())
    ap.add_argument("--quick", action="store_true", help="2 short rounds at batches 1 and 8, 200 images: it runs")
    ap.add_argument("--profile", action="store_true", help="ONNX Runtime's profile of the portable and fused graphs")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    if args.quick:
        args.batches, args.rounds, args.min_time, args.settle, args.images = "1,8", 2, 0.05, 0.0, 200

    torch.set_num_threads(args.threads)
    model, info = load_for_export(args.checkpoint, None if args.checkpoint else args.size)
    macs = model_stats(model.cfg)["macs"]
    work = tempfile.TemporaryDirectory(prefix="mlit-bench-")  # the artifacts: removed at exit
    stages = build_stages(args, model, info, Path(work.name))
    peak = sgemm_peak(0.3 if args.quick else 1.5)  # before any worker starts: nothing else computes
    best = max(peak.values())
    dataset = info["preprocess"]["dataset"]
    if dataset:
        test = load_dataset(dataset, "test")
        images, labels, norm = test.inputs()[:args.images], test.labels.numpy()[:args.images], (test.mean, test.std)
    else:  # random weights of a size without a dataset: timing only
        shape = (64, model.cfg.in_chans, model.cfg.img_size, model.cfg.img_size)
        images, labels, norm = np.random.default_rng(0).standard_normal(shape, np.float32), None, None
    workers: dict[str, StageProcess] = {}
    results, settings, profiles = [], {}, {}
    try:
        for s in stages:
            workers[s.name] = StageProcess(s.name, s.spec)
        fid = fidelity(workers, model, images, labels, norm) if labels is not None else {}
        for batch in [int(b) for b in args.batches.split(",")]:
            print(f"timing batch {batch}: {args.rounds} rounds of {len(workers)} stages ...", flush=True)
            x = np.resize(images, (batch, *images.shape[1:]))  # the first images, repeated past the last
            settings = {name: w.call("feed", x, norm) for name, w in workers.items()}
            for name, t in time_rounds(workers, args.rounds, args.min_time, args.settle).items():
                med = statistics.median(t)
                gflops = 2 * macs * batch / med / 1e9
                results.append({"stage": name, "batch": batch, "p50_ms": med * 1e3, "mean_ms": statistics.mean(t) * 1e3,
                                "img_per_s": batch / med, "gflops": gflops, "pct_peak": 100 * gflops / best,
                                "calls": len(t)})
            for name in (PORTABLE, FUSED) if args.profile else ():
                profiles[f"{name}, batch {batch}"] = workers[name].call("profile", 20 if batch > 8 else 200)
    finally:
        for w in workers.values():
            w.close()

    host = machine(settings)
    print(f"mLiT-{(info['model']['size'] or '?').upper()}, {macs / 1e6:.1f}M MACs/image, {args.threads} threads, "
          f"{host['arch']} {host['cpu']}; flags: {' '.join(f'{f}={int(v)}' for f, v in host['flags'].items())}")
    print(f"OpenVINO's CPU capabilities: {host['openvino_capabilities']}, its default hint compiled "
          f"{host['openvino_default_precision']}; {', '.join(f'{k} {v}' for k, v in host['versions'].items())}; "
          f"commit {host['commit']}")
    print("each stage in its own process, rounds alternating; sgemm peak of this run (torch fp32 matmul): "
          + ", ".join(f"n={n} {g:.1f}" for n, g in peak.items()) + f" GFLOP/s; % peak is of {best:.1f}")
    print(f"{'stage':<44}{'batch':>6}{'p50 ms':>9}{'mean ms':>9}{'img/s':>8}{'GFLOP/s':>9}{'% peak':>8}{'calls':>7}")
    for r in results:
        print(f"{r['stage']:<44}{r['batch']:>6}{r['p50_ms']:>9.2f}{r['mean_ms']:>9.2f}{r['img_per_s']:>8.0f}"
              f"{r['gflops']:>9.1f}{r['pct_peak']:>7.1f}%{r['calls']:>7}")
    if fid:
        print(f"fidelity vs PyTorch on {len(images)} test images of {dataset}:\n{'stage':<44}{'top-1':>8}{'agree':>8}"
              f"{'max|dlogit|':>12}  worst routing layer")
        for name, f in fid.items():
            worst = f"{min(f['routing']):.3f} (layer {int(np.argmin(f['routing']))})" if f["routing"] else "-"
            print(f"{name:<44}{f['top1']:>8.4f}{f['agreement']:>8.4f}{f['max_abs_err']:>12.2e}  {worst}")
    for name, rows in profiles.items():
        print(f"ONNX Runtime's profile of {name} (share of kernel time, µs per call): "
              + ", ".join(f"{op} {share:.1f}% {us:.0f}" for op, share, us in rows))
    goals = report_goals(results, fid, stages)
    if args.json:
        Path(args.json).write_text(json.dumps({"size": info["model"]["size"], "macs": macs, "threads": args.threads,
                                               "machine": host, "settings": settings, "sgemm_gflops": peak,
                                               "results": results,
                                               "fidelity": fid, "goals": goals, "profiles": profiles}, indent=2))


if __name__ == "__main__":
    main()
