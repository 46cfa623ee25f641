"""int8-ort answers the same in any batch (issue 49, item 1): the static INT8 graph for ONNX Runtime against the
dynamic one it replaced, on the same images, and their speed side by side.

The artifacts come from the project's own steps (`mlit-edge build --target onnxruntime --precision int8`: the fused
fp32 graph and the static int8-ort); the dynamic int8-ort of before issue 49 is made again from the same fp32 graph
with its settings (onnxruntime's quantize_dynamic: int8 per-channel weights on MatMul and Gemm, the router and the
activation-by-activation matmuls in float). Then, for each graph:

1. batch independence: its logits for the whole test split run at batch 1, 8, 64 and the whole split at once; the
   largest change of any image's logit between any two of those, and top-1 at each;
2. speed: each graph in its own worker process (benchmarks/_stage_worker.py), one computing at a time, in rounds
   whose order rotates, each worker replaced by a fresh one every few rounds; the median ms per call at each batch,
   and static/dynamic speed within each round (median and quartiles over the rounds), beside a control: the static
   graph against itself in a second process, whose ratio shows how far this host moves one graph's time;
3. the kernels ONNX Runtime ran (its profiler, at the largest timed batch): a Q/DQ pattern it did not fuse into an
   integer kernel shows as QuantizeLinear/DequantizeLinear time beside a float MatMul or Gemm.

    python benchmarks/int8_ort_batch.py --checkpoint pretrained:xxs-mnist5k --threads 2 --rounds 21 [--w2-int8]
"""
from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path

import numpy as np

from _stage_worker import StageProcess  # beside this script
from mlit_edge.artifacts.schema import read_record
from mlit_edge.artifacts.sidecar import publish, temporary_beside
from mlit_edge.engine.build import BuildRequest, run_build
from mlit_edge.export.handoff import HeldOut, Variant
from mlit_edge.export.precision import derived_record, float_nodes
from mlit_edge.export.quiet import quiet
from mlit_edge.runtime.runners import OnnxRuntimeRunner, predict_all

BATCHES = (1, 8, 64)  # and the whole split at once
LIMIT = 1e-4  # issue 49: an image's logits the same at every batch within this
W2_INT8 = "static int8-ort, W2 in INT8"  # --w2-int8
CONTROL = "static int8-ort, again"  # the same graph in a process of its own: the host's noise floor


def dynamic_int8(fused: Path) -> Path:
    """The int8-ort of before issue 49, made again from the fused fp32 graph with its settings, with a sidecar."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    out = fused.with_name("dynamic-int8-ort.onnx")
    source = Variant.read(fused)
    graph = source.graph()
    with temporary_beside(out) as tmp, quiet():
        quantize_dynamic(graph, str(tmp), op_types_to_quantize=["MatMul", "Gemm"], per_channel=True,
                         weight_type=QuantType.QInt8, nodes_to_exclude=sorted(float_nodes(graph)))
        publish(tmp, out, derived_record(source, "int8", {"quantization": {"mode": "dynamic (quantize_dynamic)"}}))
    return out


def static_w2_int8(fused: Path) -> Path:
    """The static int8-ort with the shipped recipe but W2 in INT8 too: the INT8 matmuls of the dynamic graph, so
    its speed against that graph is static scales against dynamic ones alone, without the price of the float W2
    that keeps the routing (issue 49 item 2)."""
    from dataclasses import replace

    from mlit_edge.export.calibration import Recipe, calibration_set
    from mlit_edge.export.int8_recipe import ONNXRUNTIME
    from mlit_edge.export.precision import to_int8_ort

    out = fused.with_name("static-w2-int8-ort.onnx")
    with temporary_beside(out) as tmp, quiet():
        made = to_int8_ort(fused, tmp, calibration_set(Recipe()).images, {}, recipe=replace(ONNXRUNTIME, classes=()))
        publish(tmp, out, made.info)
    return out


def batch_figures(path: Path, images: np.ndarray, labels: np.ndarray, threads: int) -> dict:
    """Logits at each batch: the largest change of any logit between two batch sizes, and top-1 at each."""
    record = read_record(path)
    with OnnxRuntimeRunner(path, threads=threads, session=record.ort_session) as run:
        logits = {b: predict_all(run, images, b)[0] for b in (*BATCHES, len(images))}
    sizes = list(logits)
    drift = max(float(np.abs(logits[a] - logits[b]).max()) for i, a in enumerate(sizes) for b in sizes[i + 1:])
    per_image = np.max([np.abs(logits[b] - logits[len(images)]).max(-1) for b in BATCHES], axis=0)
    return {"drift": drift, "images_moved": int((per_image > LIMIT).sum()),
            "top1": {b: float((logits[b].argmax(-1) == labels).mean()) for b in sizes}}


def quartiles(values: list[float]) -> tuple[float, float, float]:
    q = statistics.quantiles(values, n=4) if len(values) > 1 else values * 3
    return q[0], statistics.median(values), q[2]


def timing(paths: dict[str, Path], images: np.ndarray, batches: list[int], threads: int, rounds: int,
           min_time: float, respawn: int) -> tuple[dict, dict]:
    """Per (graph, batch) the median seconds per call of each round; each graph's kernels at the largest batch.
    Every `respawn` rounds each graph gets a fresh worker: where the host places a process (its cores, its memory)
    moves one process's times by several percent for the whole of its life, the same graph's as much as any."""
    names = list(paths)
    per_round: dict[tuple[str, int], list[float]] = {(n, b): [] for n in names for b in batches}
    stages: dict[str, StageProcess] = {}
    try:
        for r in range(rounds):
            if r % respawn == 0:
                for stage in stages.values():
                    stage.close()
                stages = {name: StageProcess(name, {"kind": "artifact", "path": str(p), "threads": threads})
                          for name, p in paths.items()}
            order = names[r % len(names):] + names[:r % len(names)]
            for b in batches:
                for name in order:
                    stages[name].call("feed", images[:b], None)  # the graph's input as it is: normalised images
                    per_round[(name, b)].append(statistics.median(stages[name].call("round", min_time)))
        kernels = {name: stages[name].call("profile", 20, 40) for name in names if name != CONTROL}
    finally:
        for stage in stages.values():
            stage.close()
    return per_round, kernels


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--checkpoint", default="pretrained:xxs-mnist5k")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--min-time", type=float, default=0.5, help="seconds of calls per graph, batch and round")
    ap.add_argument("--batches", default="1,64", help="the batches timed")
    ap.add_argument("--respawn", type=int, default=3, help="rounds each worker process serves before a fresh one")
    ap.add_argument("--w2-int8", action="store_true",
                    help="also time the static graph with W2 in INT8 (the dynamic graph's INT8 matmuls)")
    ap.add_argument("--work", default=None, help="where the artifacts go [default: a temporary folder]")
    args = ap.parse_args()
    batches = [int(b) for b in args.batches.split(",")]
    with tempfile.TemporaryDirectory(prefix="int8-ort-") as tmp:
        work = Path(args.work or tmp)
        print("building (mlit-edge build --target onnxruntime --precision int8) ...", flush=True)
        static = run_build(BuildRequest(checkpoint=args.checkpoint, target="onnxruntime", precision="int8",
                                        out=str(work), evaluate=False)).artifact
        fused = static.with_name(read_record(static).source_onnx)
        paths = {"fp32-ort": fused, "dynamic int8-ort (before)": dynamic_int8(fused), "static int8-ort": static}
        if args.w2_int8:
            paths[W2_INT8] = static_w2_int8(fused)
        held = HeldOut(read_record(static).dataset or "mnist5k")
        images, labels, name = held.labelled()
        print(f"\nbatch independence on {name} test ({len(images)} images), {args.threads} threads: the largest change "
              f"of any logit between batch {', '.join(map(str, BATCHES))} and {len(images)}; top-1 at each")
        for label, path in paths.items():
            f = batch_figures(path, images, labels, args.threads)
            top1 = " / ".join(f"{100 * t:.1f}" for t in f["top1"].values())
            print(f"  {label:28s} max |dlogit| {f['drift']:.2e} ({f['images_moved']} images moved > {LIMIT:g}); "
                  f"top-1 % {top1}  [{'PASS' if f['drift'] <= LIMIT else 'MISS'}]")
        timed = {k: v for k, v in paths.items() if k != "fp32-ort"}
        timed[CONTROL] = static
        per_round, kernels = timing(timed, images, batches, args.threads, args.rounds, args.min_time, args.respawn)
        old, new = list(paths)[1:3]

        def ratio(a: str, b: str, batch: int) -> tuple[float, float, float]:
            return quartiles([x / y for x, y in zip(per_round[(a, batch)], per_round[(b, batch)])])

        print(f"\nspeed, {args.threads} threads, {args.rounds} rounds in rotating order, each graph in its own process "
              f"(fresh every {args.respawn} rounds); the control is the static graph against itself in a second "
              "process: how far two processes of one graph differ on this host")
        for b in batches:
            ms = {k: 1e3 * statistics.median(per_round[(k, b)]) for k in timed}
            q1, med, q3 = ratio(old, new, b)
            c1, cmed, c3 = ratio(CONTROL, new, b)
            print(f"  batch {b:4d}: {old} {ms[old]:.3f} ms, {new} {ms[new]:.3f} ms; static speed / dynamic "
                  f"{med:.2f}x (quartiles {q1:.2f}-{q3:.2f}) [{'PASS' if med >= 1.0 else 'MISS'}]; "
                  f"control {cmed:.2f}x ({c1:.2f}-{c3:.2f})")
            if args.w2_int8:
                w1, wmed, w3 = ratio(old, W2_INT8, b)
                print(f"              {W2_INT8} {ms[W2_INT8]:.3f} ms: static speed / dynamic with the same INT8 "
                      f"matmuls {wmed:.2f}x (quartiles {w1:.2f}-{w3:.2f})")
        print(f"\nkernels ONNX Runtime ran at batch {batches[-1]} (op: share of kernel time, us per call):")
        for k, top in kernels.items():
            print(f"  {k}: " + ", ".join(f"{op} {share:.0f}% {us:.0f}" for op, share, us in top))


if __name__ == "__main__":
    main()
