"""Which layers of the INT8 graphs flip the experts: each op class (export/int8_recipe.py) and each encoder layer
left in float alone, cumulative recipes, and the calibration methods, each quantized and measured against PyTorch on
the test split (per-layer expert agreement, the worst layer, top-1 and its delta to fp32) with the share of the
model's matmul MACs still in INT8 (the proxy for TensorRT's INT8 speed: no TensorRT or GPU here). For ONNX Runtime's
flavour (int8-ort) the chosen recipe is also timed against today's, side by side (interleaved rounds).

    python benchmarks/int8_sensitivity.py --checkpoint pretrained:xxs-mnist5k --json int8_sensitivity.json
"""
from __future__ import annotations

import argparse
import json
from dataclasses import replace
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

from _int8_fidelity import decided_agreement, fp16_row  # beside this script

GOAL_AGREEMENT, GOAL_TOP1, GOAL_SPEED = 0.98, 0.003, 0.90  # issue 49 item 2


def makers(tmp: Path, model, info, calib) -> dict:
    """Per flavour: its fp32 source graph and a function (recipe, out) -> the INT8 graph's path."""
    from mlit_edge.artifacts.targets import ORT_ATTENTION
    from mlit_edge.export.onnx_export import export_onnx
    from mlit_edge.export.precision import to_int8, to_int8_ort

    portable, fused = tmp / "m-fp32.onnx", tmp / "m-fp32-ort.onnx"
    export_onnx(model, portable, info)
    export_onnx(model, fused, info, attention=ORT_ATTENTION)

    def tensorrt(recipe, out):
        to_int8(portable, out, calib.images, {}, recipe=recipe)
        return out

    def onnxruntime(recipe, out):
        to_int8_ort(fused, out, calib.images, {}, recipe=recipe)  # smooths first where the recipe asks
        return out

    return {"tensorrt": (portable, tensorrt), "onnxruntime": (fused, onnxruntime)}


def choices(depth: int, singles: bool, methods: bool, layers: bool = True) -> list[tuple[str, object]]:
    """(label, recipe) to measure before the cumulative ones."""
    from mlit_edge.export.int8_recipe import TODAY, WEIGHTED, Int8Recipe

    out = [("today", TODAY)]
    if singles:
        out += [(f"float {c}", Int8Recipe(classes=(c,))) for c in WEIGHTED]
        out += [(f"float layer {i}", Int8Recipe(layers=(i,))) for i in range(depth if layers else 0)]
    if methods:
        out += [(f"today, {m}", Int8Recipe(method=m)) for m in ("Percentile", "Entropy")]
    return out


def smoothed(alphas: tuple, methods: bool, w2: bool = False) -> list[tuple[str, object]]:
    """SmoothQuant-style smoothing (export/smoothing.py) at each alpha, alone and with the float classes of
    the pre-smoothing recipe (patch embedding and W2; `w2`: W2 alone, int8-ort's, with MinMax and percentile
    ranges)."""
    from mlit_edge.export.int8_recipe import PATCH, W2, Int8Recipe

    out = [("float w2, Percentile", Int8Recipe(classes=(W2,), method="Percentile"))] if w2 else []
    for a in alphas:
        out.append((f"smooth a={a}", Int8Recipe(smooth=a)))
        if w2:
            out.append((f"float w2 + smooth a={a}", Int8Recipe(classes=(W2,), smooth=a)))
            out.append((f"float w2 + smooth a={a}, Percentile", Int8Recipe(classes=(W2,), smooth=a,
                                                                           method="Percentile")))
        if methods:
            out.append((f"smooth a={a}, Percentile", Int8Recipe(smooth=a, method="Percentile")))
            out.append((f"smooth a={a} + float patch_embed", Int8Recipe(classes=(PATCH,), smooth=a)))
            out.append((f"smooth a={a} + float patch_embed + w2", Int8Recipe(classes=(PATCH, W2), smooth=a)))
    return out


def measure(flavour: str, label: str, recipe, make, src: Path, tmp: Path, model, held_out,
            fp32_top1: float, today_share: float | None) -> dict:
    """One choice quantized and measured: agreement per layer, worst layer, top-1 and its delta, INT8 MAC share."""
    import onnx
    from mlit_edge.export.int8_recipe import float_nodes, int8_mac_share
    from mlit_edge.export.onnx_export import variant_parity
    from mlit_edge.export.variants import evaluate_onnx

    graph = onnx.load(str(src))
    share = int8_mac_share(graph, float_nodes(graph, recipe))
    out = make(recipe, tmp / f"{flavour}-int8.onnx")
    images = held_out.sample()
    parity = variant_parity(out, model, images, normalisation=(held_out.split.mean, held_out.split.std))
    decided = decided_agreement(out, model, images, (held_out.split.mean, held_out.split.std))
    top1 = evaluate_onnx(out, held_out)["top1"]
    agree = parity["routing_agreement"]
    worst = int(np.argmin(agree))
    row = {"flavour": flavour, "choice": label, "method": recipe.method, "float": recipe.describe()[2:],
           "agreement": agree, "worst_layer": worst, "worst": agree[worst], "top1": top1,
           "delta_top1": top1 - fp32_top1, "top1_agreement": parity["top1_agreement"], "int8_mac_share": share,
           "share_vs_today": share / today_share if today_share else 1.0, "smooth": recipe.smooth,
           "decided": decided}
    row["meets"] = (row["worst"] >= GOAL_AGREEMENT and abs(row["delta_top1"]) <= GOAL_TOP1
                    and row["share_vs_today"] >= GOAL_SPEED)
    print(f"  {flavour:11s} {label:34s} worst L{worst} {agree[worst]:.3f}  top-1 {top1:.3f} "
          f"({100 * row['delta_top1']:+.1f})  INT8 MACs {share:.3f}  margin>0.01 worst {decided['0.01']['worst']:.3f}"
          f"  margin>0.05 worst {decided['0.05']['worst']:.3f}", flush=True)
    return row


def cumulative(rows: list[dict], depth: int) -> list[tuple[str, object]]:
    """Recipes that add, one at a time, the single choices that raised the worst layer most per MAC they cost."""
    from mlit_edge.export.int8_recipe import Int8Recipe

    today = rows[0]
    gains = []
    for r in rows[1:]:
        if r["method"] != "MinMax" or not r["float"]:
            continue
        lost = max(1e-4, today["int8_mac_share"] - r["int8_mac_share"])
        if r["worst"] > today["worst"]:
            gains.append(((r["worst"] - today["worst"]) / lost, r["float"][0]))
    classes: list[str] = []
    layers: list[int] = []
    out = []
    for _, what in sorted(gains, reverse=True)[:4]:
        if what.startswith("layer "):
            layers.append(int(what.split()[1]))
        else:
            classes.append(what)
        recipe = Int8Recipe(classes=tuple(classes), layers=tuple(sorted(layers)))
        out.append(("cumulative: " + " + ".join(recipe.describe()[2:]), recipe))
    return out


def weights_only(qdq: Path, out: Path) -> Path:
    """A diagnostic, not a format: the QDQ graph with its activations' Q/DQ pairs removed (INT8 weights, float
    activations), which separates the two sources of rounding error."""
    import onnx

    graph = onnx.load(str(qdq))
    producers = {o: n for n in graph.graph.node for o in n.output}
    skip = {}
    for node in graph.graph.node:
        q = producers.get(node.input[0]) if node.op_type == "DequantizeLinear" else None
        if q is not None and q.op_type == "QuantizeLinear":
            skip[node.output[0]] = q.input[0]
    for node in graph.graph.node:
        node.input[:] = [skip.get(i, i) for i in node.input]
    onnx.save(graph, str(out))
    return out


def ort_speed(today: Path, chosen: Path, rounds: int, threads: int, batches=(1, 64)) -> dict:
    """Median ms per batch of two int8-ort graphs, interleaved rounds (the machine may be shared)."""
    from mlit_edge.export.onnx_export import ORT_SESSION
    from mlit_edge.runtime.runners import OnnxRuntimeRunner

    rng = np.random.default_rng(0)
    xs = {b: rng.standard_normal((b, 3, 36, 36)).astype(np.float32) for b in batches}
    got = {(k, b): [] for k in ("today", "chosen") for b in batches}
    with OnnxRuntimeRunner(today, threads=threads, session=ORT_SESSION) as a, \
            OnnxRuntimeRunner(chosen, threads=threads, session=ORT_SESSION) as c:
        name = a.input_names[0]
        runs = {"today": a, "chosen": c}
        for r in range(rounds):
            for k in (("today", "chosen") if r % 2 == 0 else ("chosen", "today")):
                for b in batches:
                    runs[k].infer({name: xs[b]})
                    times = []
                    for _ in range(20 if b == 1 else 5):
                        t = time.perf_counter()
                        runs[k].infer({name: xs[b]})
                        times.append((time.perf_counter() - t) * 1e3)
                    got[(k, b)].append(statistics.median(times))
    return {f"b{b}": {"today_ms": statistics.median(got[("today", b)]),
                      "chosen_ms": statistics.median(got[("chosen", b)]),
                      "speed_vs_today": statistics.median(got[("today", b)]) / statistics.median(got[("chosen", b)])}
            for b in batches}


def decided(row: dict) -> str:
    d = row.get("decided") or {}
    return " / ".join(f"L{d[t]['worst_layer']} {d[t]['worst']:.3f}" for t in ("0.01", "0.05") if t in d) or "-"


def macs(row: dict) -> str:
    """A row's INT8 MAC share and its ratio to today's; "-" for a row with no INT8 arithmetic (fp16, the diagnostic)."""
    if not row["int8_mac_share"]:
        return "-"
    return f"{row['int8_mac_share']:.3f} ({row['share_vs_today']:.2f}×)"


def table(rows: list[dict]) -> str:
    """The sweep as a markdown table."""
    head = ("| flavour | choice | calibration | worst layer | agreement per layer 0..8 | margin > 0.01 / > 0.05: worst "
            "| top-1 (Δ fp32) | INT8 MACs (vs today) | goals |\n|---|---|---|---|---|---|---|---|---|")
    lines = [head]
    for r in rows:
        agree = " ".join(f"{a:.3f}" for a in r["agreement"])
        lines.append(f"| {r['flavour']} | {r['choice']} | {r['method']} | L{r['worst_layer']} {r['worst']:.3f} "
                     f"| {agree} | {decided(r)} | {100 * r['top1']:.1f} % ({100 * r['delta_top1']:+.1f}) "
                     f"| {macs(r)} | {'met' if r['meets'] else '-'} |")
    return "\n".join(lines)


def main() -> None:
    from mlit_edge.export.calibration import Recipe, calibration_set
    from mlit_edge.export.handoff import HeldOut
    from mlit_edge.export.int8_recipe import ONNXRUNTIME, TENSORRT, TODAY
    from mlit_edge.export.source import load_for_export
    from mlit_edge.export.variants import evaluate_onnx

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--checkpoint", default="pretrained:xxs-mnist5k")
    ap.add_argument("--flavours", default="tensorrt,onnxruntime")
    ap.add_argument("--no-singles", action="store_true", help="skip each class / layer alone (and the cumulative)")
    ap.add_argument("--no-layers", action="store_true", help="skip each layer alone")
    ap.add_argument("--no-methods", action="store_true", help="skip Percentile and Entropy calibration")
    ap.add_argument("--smooth", default="0.3,0.5,0.7,0.8", help="smoothing alphas to sweep ('': none)")
    ap.add_argument("--rounds", type=int, default=5, help="interleaved timing rounds (int8-ort); 0: no timing")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--json", default="int8_sensitivity.json")
    args = ap.parse_args()
    model, info = load_for_export(args.checkpoint, None)
    calib = calibration_set(Recipe())
    held_out = HeldOut(info["preprocess"]["dataset"] or "mnist5k")
    defaults = {"tensorrt": TENSORRT, "onnxruntime": ONNXRUNTIME}
    rows, speed = [], {}
    with tempfile.TemporaryDirectory(prefix="int8-sweep-") as tmpdir:
        tmp = Path(tmpdir)
        made = makers(tmp, model, info, calib)
        for flavour in args.flavours.split(","):
            src, make = made[flavour]
            fp32_top1 = evaluate_onnx(src, held_out)["top1"]
            print(f"{flavour}: fp32 top-1 {fp32_top1:.3f}", flush=True)
            methods = flavour == "tensorrt" and not args.no_methods  # int8-ort's methods: with W2 in float, below
            todo = choices(model.cfg.depth, not args.no_singles, methods, not args.no_layers)
            todo += smoothed(tuple(float(a) for a in args.smooth.split(",") if a), methods, flavour == "onnxruntime")
            mine: list[dict] = []
            for label, recipe in todo:
                mine.append(measure(flavour, label, recipe, make, src, tmp, model, held_out, fp32_top1,
                                    mine[0]["int8_mac_share"] if mine else None))
            extra = cumulative(mine, model.cfg.depth) if not args.no_singles else []
            if flavour == "tensorrt":  # the diagnostic row: today's graph with float activations
                mine.append(measure(flavour, "diagnostic: INT8 weights, float activations", TODAY,
                                    lambda r, o: weights_only(make(r, tmp / "qdq.onnx"), o), src, tmp, model, held_out,
                                    fp32_top1, mine[0]["int8_mac_share"]))
                mine[-1]["int8_mac_share"] = mine[-1]["share_vs_today"] = 0.0  # no INT8 arithmetic at all
                mine[-1]["meets"] = False
            extra.append(("default, nearest rounding", replace(defaults[flavour], rounding="nearest")))
            extra.append(("default (shipped)", defaults[flavour]))
            for label, recipe in extra:
                mine.append(measure(flavour, label, recipe, make, src, tmp, model, held_out, fp32_top1,
                                    mine[0]["int8_mac_share"]))
            mine.append(fp16_row(flavour, src, tmp, model, held_out, fp32_top1))
            rows += mine
            if flavour == "onnxruntime" and args.rounds:
                make(TODAY, tmp / "today.onnx")
                make(defaults["onnxruntime"], tmp / "chosen.onnx")
                speed = ort_speed(tmp / "today.onnx", tmp / "chosen.onnx", args.rounds, args.threads)
    print()
    print(table(rows))
    if speed:
        print(f"\nint8-ort, the shipped recipe against today's, {args.threads} threads, {args.rounds} interleaved rounds "
              "(shared machine, under load: read the ratio):")
        for b, s in speed.items():
            print(f"  {b}: today {s['today_ms']:.2f} ms, shipped {s['chosen_ms']:.2f} ms, "
                  f"speed {s['speed_vs_today']:.2f}× today's")
    Path(args.json).write_text(json.dumps({"checkpoint": args.checkpoint, "rows": rows, "ort_speed": speed,
                                           "goals": {"worst_layer_agreement": GOAL_AGREEMENT,
                                                     "top1_delta": GOAL_TOP1, "speed_vs_today": GOAL_SPEED}},
                                          indent=1) + "\n")
    print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
