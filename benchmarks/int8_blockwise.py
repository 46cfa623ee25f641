"""Finer INT8 activation scales for ONNX Runtime, measured and not shipped (issue 49, item 2): every weighted
matmul as ONNX Runtime's `MatMulNBits` with 8-bit weights in blocks of K and `accuracy_level=4`, whose CPU kernel
quantizes each row of the activations to int8 in blocks of the same K with scales of their own, computed per call
from that row alone: so still the same logits in any batch, and far finer scales than int8-ort's one per tensor.

The shipped int8-ort and the fused fp32 graph come from the project's own build (`mlit-edge build --target
onnxruntime --precision int8`); the blockwise graph is made here from the same fp32 graph (each Gemm with a constant
weight becomes a MatMul and an Add first, since the quantizer takes MatMuls; the router and the
activation-by-activation matmuls stay float, as in every INT8 recipe). For each graph: expert agreement with
PyTorch per layer on the test split, top-1, the largest change of any logit between batch 1, 8, 64 and the whole
split (int8_ort_batch.py), and its speed beside the others, each in its own process, rounds in rotating order.

    python benchmarks/int8_blockwise.py --checkpoint pretrained:xxs-mnist5k --block 32 --rounds 5
"""
from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path

import numpy as np

from int8_ort_batch import batch_figures, quartiles, timing  # beside this script
from mlit_edge.artifacts.schema import read_record
from mlit_edge.artifacts.sidecar import publish, temporary_beside
from mlit_edge.engine.build import BuildRequest, run_build
from mlit_edge.export.handoff import HeldOut, Variant
from mlit_edge.export.int8_recipe import float_nodes
from mlit_edge.export.onnx_export import variant_parity
from mlit_edge.export.precision import derived_record
from mlit_edge.export.quiet import quiet
from mlit_edge.export.source import load_for_export

GOAL = 0.98  # issue 49: worst-layer expert agreement


def gemms_as_matmuls(model) -> int:
    """Each Gemm with a constant weight (transposed or not) and no alpha/beta, outside the float nodes, as a
    MatMul of the same name and an Add of its bias, in place; returns how many."""
    from onnx import helper, numpy_helper

    inits = {t.name: t for t in model.graph.initializer}
    floats = float_nodes(model)
    nodes, n = [], 0
    for node in model.graph.node:
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        if (node.op_type != "Gemm" or node.name in floats or node.input[1] not in inits or attrs.get("transA", 0)
                or attrs.get("alpha", 1.0) != 1.0 or attrs.get("beta", 1.0) != 1.0):
            nodes.append(node)
            continue
        weight = node.input[1]
        if attrs.get("transB", 0):
            t = numpy_helper.from_array(numpy_helper.to_array(inits[weight]).T.copy(), f"{weight}_t")
            model.graph.initializer.append(t)
            weight = t.name
        product = f"{node.output[0]}_matmul" if len(node.input) > 2 else node.output[0]
        nodes.append(helper.make_node("MatMul", [node.input[0], weight], [product], name=node.name))
        if len(node.input) > 2:
            nodes.append(helper.make_node("Add", [product, node.input[2]], [node.output[0]], name=f"{node.name}_bias"))
        n += 1
    del model.graph.node[:]
    model.graph.node.extend(nodes)
    return n


def blockwise_int8(fused: Path, block: int) -> Path:
    """The fused fp32 graph with every weighted matmul as an 8-bit MatMulNBits (accuracy_level 4), with a sidecar."""
    import onnx
    from onnxruntime.quantization.matmul_nbits_quantizer import DefaultWeightOnlyQuantConfig, MatMulNBitsQuantizer

    source = Variant.read(fused)
    model = onnx.ModelProto()
    model.CopyFrom(source.graph())
    gemms_as_matmuls(model)
    config = DefaultWeightOnlyQuantConfig(block_size=block, is_symmetric=True, accuracy_level=4, bits=8)
    quantizer = MatMulNBitsQuantizer(model, nodes_to_exclude=sorted(float_nodes(model)), algo_config=config)
    with quiet():
        quantizer.process()
    made = quantizer.model.model
    print(f"  {sum(n.op_type == 'MatMulNBits' for n in made.graph.node)} MatMulNBits (block {block}); "
          f"{sum(n.op_type == 'MatMul' for n in made.graph.node)} float MatMuls left", flush=True)
    out = fused.with_name(f"blockwise{block}-int8.onnx")
    with temporary_beside(out) as tmp:
        onnx.save(made, str(tmp))
        publish(tmp, out, derived_record(source, "int8", {"quantization": {
            "mode": f"MatMulNBits, 8-bit weights and per-row int8 activations in blocks of {block}"}}))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--checkpoint", default="pretrained:xxs-mnist5k")
    ap.add_argument("--block", type=int, default=32, help="MatMulNBits block size along K (16, 32, 64, 128, ...)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--min-time", type=float, default=0.5, help="seconds of calls per graph, batch and round")
    ap.add_argument("--batches", default="1,64", help="the batches timed")
    args = ap.parse_args()
    if args.block < 16 or args.block & (args.block - 1):
        ap.error(f"--block {args.block}: MatMulNBits takes a power of two, 16 or more")
    batches = [int(b) for b in args.batches.split(",")]
    with tempfile.TemporaryDirectory(prefix="int8-blockwise-") as tmp:
        print("building (mlit-edge build --target onnxruntime --precision int8) ...", flush=True)
        static = run_build(BuildRequest(checkpoint=args.checkpoint, target="onnxruntime", precision="int8",
                                        out=tmp, evaluate=False)).artifact
        fused = static.with_name(read_record(static).source_onnx)
        paths = {"fp32-ort": fused, "int8-ort (shipped)": static,
                 f"blockwise int8 (block {args.block})": blockwise_int8(fused, args.block)}
        model, info = load_for_export(args.checkpoint, None)
        held = HeldOut(read_record(static).dataset or "mnist5k")
        images, labels, name = held.labelled()
        norm = (held.split.mean, held.split.std)
        print(f"\non {name} test ({len(images)} images): expert agreement with PyTorch per layer, top-1, and the "
              "largest change of any logit between batch 1, 8, 64 and the whole split")
        for label, path in paths.items():
            agree = variant_parity(path, model, held.sample(), normalisation=norm)["routing_agreement"]
            f = batch_figures(path, images, labels, args.threads)
            worst = int(np.argmin(agree))
            print(f"  {label:28s} worst L{worst} {agree[worst]:.3f} [{'PASS' if agree[worst] >= GOAL else 'MISS'}] "
                  f"({' '.join(f'{a:.3f}' for a in agree)}); top-1 {100 * f['top1'][len(images)]:.1f} %; "
                  f"max |dlogit| across batches {f['drift']:.1e}", flush=True)
        per_round, _ = timing(paths, images, batches, args.threads, args.rounds, args.min_time)
        print(f"\nspeed, {args.threads} threads, {args.rounds} rounds in rotating order, each graph in its own process; "
              "ratios within each round, median (quartiles)")
        base, shipped, block = list(paths)
        for b in batches:
            ms = {k: 1e3 * statistics.median(per_round[(k, b)]) for k in paths}
            line = ", ".join(f"{k} {v:.3f} ms" for k, v in ms.items())
            ratios = []
            for ref in (shipped, base):
                q1, med, q3 = quartiles([r / x for r, x in zip(per_round[(ref, b)], per_round[(block, b)])])
                ratios.append(f"{med:.2f}x {ref}'s ({q1:.2f}-{q3:.2f})")
            print(f"  batch {b:4d}: {line}\n              blockwise speed: {'; '.join(ratios)}")


if __name__ == "__main__":
    main()
