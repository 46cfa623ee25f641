"""Which layers of an INT8 graph stay in float: the quantizable nodes of an exported mLiT classified by what
they compute, and the recipe that keeps the routing-sensitive ones out of INT8.

The classes are read from the graph's structure, not from node or weight names (which exporters, head
padding, `--raw-input` and the TensorRT 8.5 rewrite each spell their own way). Every weighted MatMul/Gemm/Conv
that is not part of the router sits at a *stage* of the residual stream: the patch embedding's Conv is stage 0,
and each encoder layer adds four, the attention's input projections (q/k/v, one or several nodes), its output
projection, the MoE's input projection and its W2. The stage of a node is one more than the highest stage among
its inputs' weighted ancestors, so stage 4*i + 1..4 is layer i's, and the weighted node after the last layer
is the head. The MoE's input projection is one Gemm carrying every expert's W1 and the shared V
(`static.StaticMoE`: `[W_1 ... W_E | V]`); W1 and V share its input, so they are one class here.

`float_nodes` is what the INT8 makers leave out of INT8: the router and the activation-by-activation matmuls
always, and the classes and layers of the recipe (`Int8Recipe`), chosen by `benchmarks/int8_sensitivity.py`
(docs/measurements.md).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NamedTuple

from .channel_trace import shapes_at_batch1

PATCH, ATTN_IN, ATTN_OUT, EXPERT_IN, W2, HEAD = "patch_embed", "attn_qkv", "attn_out", "expert_in", "w2", "head"
ROUTER, ACTIVATION = "router", "activation_matmul"  # always float
WEIGHTED = (PATCH, ATTN_IN, ATTN_OUT, EXPERT_IN, W2, HEAD)  # what a recipe may keep in float
LAYER_STAGES = (ATTN_IN, ATTN_OUT, EXPERT_IN, W2)  # one encoder layer's weighted stages, in order
MATMULS = ("MatMul", "Gemm", "Conv")  # what the quantizers quantize
ROUNDINGS = ("nearest", "gptq")  # how a recipe rounds the INT8 weights


def constant_names(model) -> set[str]:
    """The names of the tensors a graph holds as constants: its initializers and its Constant nodes' outputs."""
    return {t.name for t in model.graph.initializer} | {n.output[0] for n in model.graph.node
                                                        if n.op_type == "Constant"}


def router_nodes(model) -> set[str]:
    """Names of the routing nodes: each TopK, the MatMul/Gemm producing its input, and every node fed only
    by routing nodes or constants (the softmax over the top k, the one-hot gate matrix)."""
    producers = {o: n for n in model.graph.node for o in n.output}
    constants = constant_names(model)
    routed: set[str] = set()
    routed_outputs: set[str] = set()
    for node in model.graph.node:
        if node.op_type == "TopK":
            src = producers.get(node.input[0])
            while src is not None and src.op_type not in ("MatMul", "Gemm"):  # through a Reshape, if any
                src = producers.get(src.input[0])
            for n in (node, src):
                if n is not None:
                    routed.add(n.name)
                    routed_outputs.update(n.output)
    changed = True
    while changed:  # the graph is topologically sorted, but one more sweep keeps this robust
        changed = False
        for node in model.graph.node:
            if node.name in routed or node.op_type == "Constant":
                continue
            ins = [i for i in node.input if i]
            if ins and any(i in routed_outputs for i in ins) and all(i in routed_outputs or i in constants
                                                                     for i in ins):
                routed.add(node.name)
                routed_outputs.update(node.output)
                changed = True
    return routed


def activation_matmuls(model) -> set[str]:
    """MatMuls of two activations (attention scores, attention x values, gates x experts): no weight to
    quantize per channel, and the softmax/gate operands lose most of their precision in int8."""
    weights = constant_names(model)
    producers = {o: n for n in model.graph.node for o in n.output}

    def from_weight(name: str) -> bool:
        node = producers.get(name)  # a weight may reach the MatMul through a Transpose or Reshape
        while node is not None and node.op_type in ("Transpose", "Reshape", "Cast") and node.input[0] not in weights:
            node = producers.get(node.input[0])
        return name in weights or (node is not None and node.op_type in ("Transpose", "Reshape", "Cast")
                                   and node.input[0] in weights)

    return {n.name for n in model.graph.node if n.op_type == "MatMul" and not any(from_weight(i) for i in n.input)}


class OpClass(NamedTuple):
    """What one matmul-class node computes, and the encoder layer it belongs to (None: before or after them)."""

    op_class: str
    layer: int | None


def classify(model) -> dict[str, OpClass]:
    """Every MatMul/Gemm/Conv node of an exported mLiT (fp32, any of its graph forms) by name, with its class
    and layer; a ValueError names the first node whose place breaks the pattern (not an mLiT export)."""
    routers, acts = router_nodes(model), activation_matmuls(model)
    depth = sum(n.op_type == "TopK" for n in model.graph.node)
    stage: dict[str, int] = {}  # tensor -> highest stage of the weighted nodes it derives from (-1: none)
    out: dict[str, OpClass] = {}
    for node in model.graph.node:
        above = max((stage.get(i, -1) for i in node.input if i), default=-1)
        weighted = node.op_type in MATMULS and node.name not in routers and node.name not in acts
        if node.op_type in MATMULS and not weighted:
            out[node.name] = OpClass(ROUTER if node.name in routers else ACTIVATION, max(0, above - 1) // 4)
        here = above + 1 if weighted else above
        stage.update((o, here) for o in node.output)
        if not weighted:
            continue
        if here == 0 and node.op_type == "Conv":
            out[node.name] = OpClass(PATCH, None)
        elif 1 <= here <= 4 * depth and node.op_type != "Conv":
            out[node.name] = OpClass(LAYER_STAGES[(here - 1) % 4], (here - 1) // 4)
        elif here == 4 * depth + 1 and model.graph.output[0].name in _downstream(model, node):
            out[node.name] = OpClass(HEAD, None)
        else:
            raise ValueError(f"node {node.name} ({node.op_type}) sits at stage {here} of a {depth}-layer graph: "
                             "not the layout of an mLiT export")
    return out


def _downstream(model, node) -> set[str]:
    """The tensors computed from `node`'s outputs (the graph is topologically sorted)."""
    reached = set(node.output)
    for n in model.graph.node:
        if any(i in reached for i in n.input):
            reached.update(n.output)
    return reached


@dataclass(frozen=True)
class Int8Recipe:
    """The weighted nodes an INT8 graph keeps in float besides the router: whole classes (`classes`), whole
    encoder layers (`layers`), and single (class, layer) cells; how a calibrated graph sets its activation
    ranges (`method`: ONNX Runtime's MinMax or Entropy, or Percentile: ONNX Runtime's rule computed by
    `ranges.py`), whether it smooths the activations first
    (`smooth`) and how it rounds the INT8 weights (`rounding`)."""

    classes: tuple[str, ...] = ()
    layers: tuple[int, ...] = ()
    cells: tuple[tuple[str, int], ...] = ()
    method: str = "MinMax"
    smooth: float | None = None  # SmoothQuant's alpha: activation outliers moved into the weights first (smoothing.py)
    rounding: str = "nearest"  # or "gptq": the INT8 weights rounded to keep each layer's output (weight_rounding.py)

    def __post_init__(self) -> None:
        unknown = sorted({c for c in self.classes} - set(WEIGHTED) | {c for c, _ in self.cells} - set(LAYER_STAGES))
        if unknown:
            raise ValueError(f"unknown op class(es) {', '.join(unknown)}: choose from {', '.join(WEIGHTED)}")
        if self.method not in ("MinMax", "Percentile", "Entropy"):
            raise ValueError(f"calibration method {self.method!r}: choose MinMax, Percentile or Entropy")
        if self.rounding not in ROUNDINGS:
            raise ValueError(f"weight rounding {self.rounding!r}: choose {' or '.join(ROUNDINGS)}")
        if self.smooth is not None and not 0.0 < self.smooth < 1.0:
            raise ValueError(f"smoothing alpha {self.smooth}: choose a value between 0 and 1")

    def keeps(self, op: OpClass) -> bool:
        """Whether a node of class and layer `op` stays in float."""
        return (op.op_class in self.classes or (op.layer is not None and op.layer in self.layers)
                or (op.op_class, op.layer) in self.cells)

    def describe(self) -> list[str]:
        """The recipe in words, for a sidecar and a table: ["router", "w2", "layer 7", "expert_in layer 8"]."""
        return (["router", "activation-by-activation matmuls"] + list(self.classes)
                + [f"layer {i}" for i in self.layers] + [f"{c} layer {i}" for c, i in self.cells])

    def record(self, model, floats: set[str]) -> dict:
        """What a sidecar says of the recipe applied to `model`: what stayed in float, and the INT8 share of MACs."""
        return {"float": self.describe(), "int8_mac_share": round(int8_mac_share(model, floats), 4),
                "ranges": self.method, "smoothing_alpha": self.smooth, "weight_rounding": self.rounding}


TODAY = Int8Recipe()  # the recipe before issue 49: only the router and the activation matmuls in float
# TensorRT's QDQ graph (precision.to_int8, Q/DQ on the weighted matmuls' inputs only): the patch embedding and W2
# in float lift the worst layer from 0.937 to 0.971 for 0.91x the INT8 MACs; smoothing (a=0.8, an exact rewrite)
# to 0.977; GPTQ rounding of the weights (the same nodes and scales) to 0.981, and percentile ranges to 0.982 on
# each of three calibration seeds, where MinMax gave 0.979-0.981 (docs/measurements.md)
TENSORRT = Int8Recipe(classes=(PATCH, W2), method="Percentile", smooth=0.8, rounding="gptq")
# ONNX Runtime's static INT8 graph (int8-ort): W2 in float lifts its worst layer from 0.945 to 0.972 for 0.91x the
# INT8 MACs, the most of any single class; smoothing (a=0.8) to 0.977-0.978 on three calibration seeds; GPTQ
# rounding with percentile ranges to 0.981-0.982 on the same seeds (MinMax: 0.978-0.981; docs/measurements.md).
# W2 is a plain float Gemm, whose answer does not depend on the batch (precision.batch_drift checks every build)
ONNXRUNTIME = Int8Recipe(classes=(W2,), method="Percentile", smooth=0.8, rounding="gptq")


def float_nodes(model, recipe: Int8Recipe = TODAY) -> set[str]:
    """The names of the nodes an INT8 graph of `model` leaves in float: the router, the activation-by-activation
    matmuls, and every weighted node `recipe` keeps."""
    kept = {name for name, op in classify(model).items() if op.op_class in WEIGHTED and recipe.keeps(op)}
    return router_nodes(model) | activation_matmuls(model) | kept


def node_macs(model) -> dict[str, int]:
    """Multiply-accumulates of each MatMul/Gemm/Conv for one image, from the graph's shapes inferred at batch 1."""
    shapes = shapes_at_batch1(model)
    macs = {}
    for node in model.graph.node:
        if node.op_type not in MATMULS:
            continue
        a, y = shapes.get(node.input[0]), shapes.get(node.output[0])
        if not a or not y or 0 in a or 0 in y:
            raise ValueError(f"node {node.name}: shapes not inferred at batch 1")
        trans_a = any(at.name == "transA" and at.i for at in node.attribute)
        reduce = (math.prod(shapes[node.input[1]][1:]) if node.op_type == "Conv"
                  else a[0] if node.op_type == "Gemm" and trans_a else a[-1])
        macs[node.name] = math.prod(y) * reduce
    return macs


def int8_mac_share(model, floats: set[str]) -> float:
    """The share of the graph's matmul-class MACs left in INT8 when `floats` stay in float (a proxy for INT8
    speed where the engine cannot be timed)."""
    macs = node_macs(model)
    return sum(m for n, m in macs.items() if n not in floats) / max(1, sum(macs.values()))
