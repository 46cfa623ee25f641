"""The fusion report of `mlit-edge check`: per layer, whether the ONNX's attention has the shape TensorRT fuses
into one kernel, and which documented rule fails where not; and whether LayerNorm is the opset-17 op or the
primitive pattern TensorRT recognises. A prediction from documented rules (devices.mha_rules cites each),
never an observation: no engine is profiled here.

The attention TensorRT fuses (Developer Guide, MHA fusion; devices.mha_rules "DG"): MatMul (BMM1) -> an optional
scale (Mul/Div by a constant; ours is folded into the query weights) -> Softmax -> MatMul (BMM2). Casts around
the softmax (the fp16 recipe keeps it fp32) are passed over: DG's type rule is on the two matmuls' inputs.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

from ..devices import mha_rules as rules
from ..devices.profiles import DeviceProfile

PASS_OVER = {"Cast"}  # between BMM1, the softmax and BMM2: no change of pattern, only of type
SCALE_OPS = {"Mul", "Div"}
BLOCK = re.compile(r"/blocks\.(\d+)[:/]")
ELEM = {1: "float32", 10: "float16", 16: "bfloat16", 3: "int8", 2: "uint8"}
PREDICTION = ("fusion: a prediction from NVIDIA's documented rules (TensorRT Developer Guide, MHA fusion, as quoted in "
              "NVIDIA/TensorRT#2981 and #4167; #2736, #3280, #3575, #3643 for 8.5/8.6), not an observation")


@dataclass
class AttentionFusion:
    """One layer's attention against the documented fusion rules."""

    layer: int
    head_size: int | None
    dtype: str  # of the two matmuls' inputs: float32, float16, bfloat16 or int8 (behind DequantizeLinear)
    scale: str  # "folded into the query weights" or the op that scales
    failed: list[str] = field(default_factory=list)  # each failed rule with its source
    notes: list[str] = field(default_factory=list)

    @property
    def fusable(self) -> bool:
        return not self.failed


def _links(model) -> tuple[dict, dict[str, list]]:
    """Each tensor's producing node and consuming nodes (no shape inference: cheap)."""
    producer = {o: n for n in model.graph.node for o in n.output}
    consumers: dict[str, list] = {}
    for n in model.graph.node:
        for i in n.input:
            consumers.setdefault(i, []).append(n)
    return producer, consumers


def _first(names) -> str | None:
    """A node's first input or output name; None where it has none (a malformed node: engine.malformed)."""
    return names[0] if len(names) and names[0] else None


def _inferred(model):
    """`model` with inferred shapes; the model as it is where shape inference refuses it (a graph without an
    opset import, a node with too few inputs: `check` reports those as engine.malformed's FAIL lines)."""
    import onnx

    try:
        return onnx.shape_inference.infer_shapes(model)
    except Exception:  # onnx.shape_inference.InferenceError, and what a malformed node makes it raise
        return model


class _Graph:
    def __init__(self, model, inferred=None) -> None:
        self.producer, self.consumers = _links(model)
        self.consts = {t.name for t in model.graph.initializer}
        self.consts |= {o for n in model.graph.node if n.op_type == "Constant" for o in n.output}
        graph = (inferred if inferred is not None else _inferred(model)).graph
        self.types = {}
        for vi in [*graph.input, *graph.value_info, *graph.output]:
            tt = vi.type.tensor_type
            dims = [d.dim_value if d.HasField("dim_value") else None for d in tt.shape.dim]
            self.types[vi.name] = (ELEM.get(tt.elem_type, str(tt.elem_type)), dims)

    def back(self, name: str, skip: set[str]):
        """The producer of `name`, passing over nodes in `skip` (first input); with the ops passed over."""
        node, seen = self.producer.get(name), []
        while node is not None and node.op_type in skip and len(seen) <= len(self.producer):
            seen.append(node)
            node = self.producer.get(_first(node.input))
        return node, seen

    def forward(self, name: str, skip: set[str]):
        """The single consumer of `name`, passing over nodes in `skip`; with the ops passed over."""
        seen = []
        while True:
            users = self.consumers.get(name, [])
            if len(users) != 1:
                return None, seen
            if users[0].op_type not in skip:
                return users[0], seen
            seen.append(users[0])
            name = _first(users[0].output)
            if name is None or len(seen) > len(self.producer):  # no output, or a cycle a hostile graph made
                return None, seen


def _layer(node, index: int) -> int:
    scope = next((p.value for p in node.metadata_props if p.key == "namespace"), "")
    found = BLOCK.search(scope)
    return int(found.group(1)) if found else index


def attention_fusion(model, profile: DeviceProfile, inferred=None) -> list[AttentionFusion]:
    """Each attention (a Softmax between two activation MatMuls) against the rules of `profile`'s TensorRT.
    `inferred`: the model with its shapes inferred, where the caller has it."""
    g = _Graph(model, inferred)
    int8_graph = any(n.op_type == "QuantizeLinear" for n in model.graph.node)
    out: list[AttentionFusion] = []
    for softmax in (n for n in model.graph.node if n.op_type == "Softmax" and _first(n.input) and _first(n.output)):
        bmm1, before = g.back(softmax.input[0], PASS_OVER | SCALE_OPS | {"QuantizeLinear", "DequantizeLinear"})
        bmm2, after = g.forward(softmax.output[0], PASS_OVER | {"QuantizeLinear", "DequantizeLinear"})
        if bmm1 is None or bmm2 is None or bmm1.op_type != "MatMul" or bmm2.op_type != "MatMul" \
                or len(bmm1.input) != 2 or not bmm2.input or not bmm2.output or any(i in g.consts for i in bmm1.input):
            continue  # not attention: the router's softmax over its top-k, say
        q_src, k_src = (g.producer.get(i) for i in bmm1.input)
        q_dims = g.types.get(bmm1.input[0], ("", []))[1]
        k_dims = g.types.get(bmm1.input[1], ("", []))[1]
        head = q_dims[-1] if q_dims else None
        dequantized = all(p is not None and p.op_type == "DequantizeLinear" for p in (q_src, k_src))
        dtype = "int8" if dequantized else g.types.get(bmm1.input[0], ("?", []))[0]
        scales = [n.op_type for n in before if n.op_type in SCALE_OPS]
        f = AttentionFusion(_layer(softmax, len(out)), head, dtype,
                            f"{scales[0]} before the softmax" if scales else "folded into the query weights")
        why_not = rules.version_rule(profile.tensorrt)  # TensorRT 8.5 / 8.6 (devices.mha_rules)
        if why_not:
            f.failed.append(why_not)
        sm_fail, sm_note = rules.sm_rule(profile.jetpack)  # DG: SM >= 75
        f.failed += [sm_fail] if sm_fail else []
        f.notes += [sm_note] if sm_note else []
        if int8_graph or dtype == "int8":
            _int8_rules(f, g, bmm1, softmax, bmm2, dequantized, q_dims, k_dims)
        elif dtype not in rules.FUSED_TYPES:  # DG: the matmuls' inputs must be FP16, INT8 or BF16
            f.failed.append(f"the two matmuls' inputs are {dtype}: fused attention takes FP16, BF16 or INT8 (DG)")
            head_fail = rules.head_rule(head, "float16") if head else None
            f.notes.append(f"in fp16 the head-size rule would {'fail: ' + head_fail if head_fail else 'hold'}")
        elif head is not None and rules.head_rule(head, dtype):  # DG: FP16/BF16 head sizes
            f.failed.append(rules.head_rule(head, dtype))
        if q_dims and len(q_dims) != 4:  # the fused-attention docs describe Q, K, V of shape [B, N, S, H]
            f.notes.append(f"the matmuls are rank {len(q_dims)} (GQA as a broadcast of each group's K/V over its "
                           "query heads); the documents describe [B, N, S, H] and do not say whether this form matches")
        if any(n.op_type == "Cast" for n in before + after):
            f.notes.append("the softmax runs in fp32 between Casts (the fp16 recipe); DG's type rule is on the matmuls")
        out.append(f)
    return out


def _int8_rules(f: AttentionFusion, g: _Graph, bmm1, softmax, bmm2, dequantized: bool, q_dims, k_dims) -> None:
    """DG's INT8 rules: Q/DQ before BMM1, after the softmax and after BMM2; head 16/32/64; sequences <= 512."""
    probs = g.producer.get(bmm2.input[0])
    after_softmax = probs is not None and probs.op_type == "DequantizeLinear"
    users = g.consumers.get(bmm2.output[0], [])
    after_bmm2 = bool(users) and all(u.op_type == "QuantizeLinear" for u in users)
    missing = [where for where, ok in (("before the first matmul", dequantized), ("after the softmax", after_softmax),
                                       ("after the second matmul", after_bmm2)) if not ok]
    if missing:
        f.failed.append("Q/DQ placement: INT8 fused attention needs Q/DQ before the first matmul, after the softmax "
                        f"and after the second (DG); missing {', '.join(missing)} (this INT8 keeps attention in float)")
    if f.head_size is not None and rules.head_rule(f.head_size, "int8"):
        f.failed.append(rules.head_rule(f.head_size, "int8"))
    seq = max((d for d in (q_dims[-2:-1] + k_dims[-1:]) if d), default=None) if q_dims and k_dims else None
    if seq is not None and seq > rules.INT8_MAX_SEQ:  # DG: INT8 sequence lengths
        f.failed.append(f"sequence length {seq}: INT8 fused attention needs <= {rules.INT8_MAX_SEQ} (DG)")


def layernorm_form(model) -> str:
    """How the graph writes LayerNorm: the opset-17 op, the decomposed pattern, or none."""
    ops = [n.op_type for n in model.graph.node]
    native = ops.count("LayerNormalization")
    producer, consumers = _links(model)

    # an fp16 graph keeps LayerNorm in fp32 behind Casts, one per consumer (export.fp16): look through them
    def origin(name: str) -> str:
        seen = 0
        while name in producer and producer[name].op_type == "Cast" and _first(producer[name].input) \
                and seen <= len(producer):  # a Cast cycle in a hostile graph ends too
            name, seen = producer[name].input[0], seen + 1
        return name

    def users(name: str | None) -> list:
        out, todo, seen = [], [name], set()
        while todo:  # a worklist, not recursion: a chain of 10,000 Casts is a graph too
            name = todo.pop()
            if not name or name in seen:
                continue
            seen.add(name)
            for u in consumers.get(name, []):
                todo += [_first(u.output)] if u.op_type == "Cast" else []
                out += [] if u.op_type == "Cast" else [u]
        return out

    decomposed = 0
    for mean in (n for n in model.graph.node if n.op_type == "ReduceMean" and _first(n.input)):
        # mean -> Sub(x, mean) -> Mul(c, c) or Pow -> ReduceMean -> Add(eps) -> Sqrt -> Div(c, std)
        x = origin(mean.input[0])
        sub = next((u for u in users(_first(mean.output)) if u.op_type == "Sub" and x in map(origin, u.input)), None)
        square = next((u for u in users(_first(sub.output)) if u.op_type in ("Mul", "Pow")), None) if sub else None
        chain, name = [], _first(square.output) if square else None
        for op in ("ReduceMean", "Add", "Sqrt", "Div"):
            nxt = next((u for u in users(name) if u.op_type == op), None) if name else None
            chain.append(nxt)
            name = _first(nxt.output) if nxt else None
        decomposed += all(chain)
    parts = []
    if native:  # #2781 (NVIDIA, 2023-03-18): opset 17's op; 8.6's optimizer handles its precision itself
        parts.append(f"{native} LayerNormalization op(s) (opset 17+: TensorRT's INormalizationLayer, 8.6 and newer; "
                     "NVIDIA/TensorRT#2781)")
    if decomposed:  # TensorRT's builder names this pattern ("Detected layernorm nodes in FP16", #2781, 8.5/8.6)
        parts.append(f"{decomposed} decomposed (ReduceMean, Sub, Mul, ReduceMean, Add, Sqrt, Div): the primitive "
                     "pattern TensorRT's builder recognises as layernorm (its 'Detected layernorm nodes' warning, "
                     "NVIDIA/TensorRT#2781; jetpack-5.1 writes it, as 8.5-GA's parser lacks the op)")
    return "; ".join(parts) or "none found"


def format_fusion(fusion: list[dict], layernorm: str | None, profile: str | None) -> list[str]:
    """The report's lines (from `CheckReport.fusion`, as dicts)."""
    if not fusion and layernorm is None:
        return []
    lines = [f"  {PREDICTION}; for {profile or 'tensorrt-10'}:"]
    common = [n for n in fusion[0]["notes"] if all(n in f["notes"] for f in fusion)] if fusion else []
    lines += [f"    every layer: {n}" for n in common]
    for f in fusion:
        verdict = "fusable" if not f["failed"] else "NOT fusable"
        lines.append(f"    layer {f['layer']}: attention {verdict} (head size {f['head_size']}, {f['dtype']}, scale "
                     f"{f['scale']})")
        lines += [f"      rule failed: {r}" for r in f["failed"]]
        lines += [f"      note: {n}" for n in f["notes"] if n not in common]
    if not fusion:
        lines.append("    no attention (MatMul -> Softmax -> MatMul) found")
    lines.append(f"    LayerNorm: {layernorm}")
    return lines
