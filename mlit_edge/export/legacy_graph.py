"""An opset-18 export rewritten so that TensorRT 8.5 / 8.6's ONNX parser (JetPack 5.1 / 6.0) takes it:
`for_parser` lowers the opset (a ValueError names any op it cannot lower: no silent relabel), decomposes
LayerNormalization into primitive ops named "<original>/decomposed/<step>" (`layernorm_island`, which
precision.to_fp16 keeps in fp32), and makes every TopK's K an initializer. Nothing else changes (names,
order, value_info, metadata_props, ir_version). Rules cite github.com/onnx/onnx-tensorrt <branch>:
docs/operators.md (engine/data/onnx_trt_ops.json). onnx.version_converter has no 18 -> 17 Pad adapter.
"""
from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, defs, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

DECOMPOSED = "/decomposed/"  # the infix of every node a LayerNormalization became
# 8.5-GA docs/operators.md: LayerNormalization not supported, so "decomposed"; 8.6-GA: "Y", so "native" works
LAYERNORM_MODES = ("decomposed", "native")
# axes moved from an attribute (v13) to an input (v18) in these; ReduceSum moved at 13 already
REDUCE_18 = ("ReduceL1", "ReduceL2", "ReduceLogSum", "ReduceLogSumExp", "ReduceMax", "ReduceMean", "ReduceMin",
             "ReduceProd", "ReduceSumSquare")
_DEFAULT = ("", "ai.onnx")
Dims = list[int | None] | None


class _Ctx:
    """What the rewrites look up: constants (initializers, Constant nodes and chains of them, folded by
    ONNX's reference evaluator) and each tensor's inferred element type and static dims."""

    def __init__(self, model: onnx.ModelProto, opset: int) -> None:
        g = self.g = model.graph
        self.opset, self._values = opset, dict[str, "np.ndarray | None"]()
        inputs = {i.name for i in g.input}  # an initializer that is also an input can be fed: not constant
        self.inits = {t.name: t for t in g.initializer if t.name not in inputs}
        self.producers = {o: n for n in g.node for o in n.output if o}
        self.types: dict[str, tuple[int, Dims]] = {t.name: (t.data_type, list(t.dims)) for t in g.initializer}
        inferred = onnx.shape_inference.infer_shapes(model).graph  # fills what value_info leaves out
        for vi in [*inferred.input, *inferred.value_info, *inferred.output]:
            tt = vi.type.tensor_type
            self.types[vi.name] = (tt.elem_type, [d.dim_value if d.HasField("dim_value") else None
                                                  for d in tt.shape.dim] if tt.HasField("shape") else None)

    def dims(self, name: str) -> Dims:
        return self.types.get(name, (0, None))[1]

    def value(self, name: str) -> np.ndarray | None:
        """The tensor's value when it is a compile-time constant, else None."""
        if name not in self._values:
            self._values[name] = None  # a cycle (a malformed graph) reads as "not constant"
            self._values[name] = self._fold(name)
        return self._values[name]

    def _fold(self, name: str) -> np.ndarray | None:
        if name in self.inits:
            return numpy_helper.to_array(self.inits[name])
        node = self.producers.get(name)
        if node is None or node.domain not in _DEFAULT or "Random" in node.op_type or node.op_type == "Multinomial":
            return None  # a graph input, a custom op, or a value drawn anew each run
        feeds = {i: self.value(i) for i in node.input if i}
        if any(v is None for v in feeds.values()):
            return None
        outs = ReferenceEvaluator(node, opsets={"": self.opset}).run(None, feeds)
        return np.asarray(list(outs)[list(node.output).index(name)])

    def const(self, node: onnx.NodeProto, i: int, what: str) -> np.ndarray:
        v = self.value(node.input[i])
        if v is None:
            raise ValueError(f"{node.op_type} {node.name!r}: its {what} ({node.input[i]}) is not a compile-time "
                             "constant, so it cannot be lowered")
        return v.astype(np.int64).reshape(-1)

    def add_init(self, name: str, value: np.ndarray) -> str:
        while name in self.types or name in self.producers:  # never shadow an existing tensor
            name += "_"
        self.g.initializer.append(numpy_helper.from_array(value, name))
        self.types[name] = (helper.np_dtype_to_tensor_dtype(value.dtype), list(value.shape))
        return name


def _attrs(node: onnx.NodeProto) -> dict:
    return {a.name: helper.get_attribute_value(a) for a in node.attribute}


def _set_nodes(graph: onnx.GraphProto, nodes: list[onnx.NodeProto]) -> None:
    copies = [onnx.NodeProto.FromString(n.SerializeToString()) for n in nodes]  # the old elements go with the list
    del graph.node[:]
    graph.node.extend(copies)


def _lower_split(node: onnx.NodeProto, ctx: _Ctx) -> bool:
    """Split-18 -> Split-13: `num_outputs` (new in 18) becomes the explicit `split` sizes input."""
    attrs = _attrs(node)
    if "num_outputs" not in attrs:
        return False  # `split` given as an input (our exports), or neither: Split-13 reads both alike
    n, axis, dims = attrs["num_outputs"], attrs.get("axis", 0), ctx.dims(node.input[0])
    size = dims[axis] if dims and -len(dims) <= axis < len(dims) else None
    if size is None:
        raise ValueError(f"Split {node.name!r}: num_outputs needs axis {axis}'s static size to lower to opset 13")
    chunk = -(-size // n)  # Split-18: chunks of ceil(size / n), the last one what is left
    sizes = np.array([chunk] * (n - 1) + [size - chunk * (n - 1)], np.int64)
    node.attribute.remove(next(a for a in node.attribute if a.name == "num_outputs"))
    del node.input[1:]
    node.input.append(ctx.add_init(f"{node.name}/split", sizes))
    return True


def _lower_pad(node: onnx.NodeProto, ctx: _Ctx) -> bool:
    """Pad-18 -> Pad-13: the same op but for the optional `axes` input (new in 18), never set by our exports."""
    if len(node.input) > 3 and node.input[3]:
        raise ValueError(f"Pad {node.name!r}: its `axes` input (new in opset 18) is not lowered")
    return False


def _lower_reduce(node: onnx.NodeProto, ctx: _Ctx) -> bool:
    """Reduce*-18 -> Reduce*-13: the `axes` input back to an attribute; no `noop_with_empty_axes`."""
    axes = ctx.const(node, 1, "axes") if len(node.input) > 1 and node.input[1] else np.zeros(0, np.int64)
    if _attrs(node).get("noop_with_empty_axes", 0) and not axes.size:
        raise ValueError(f"{node.op_type} {node.name!r}: noop_with_empty_axes with no axes has no opset-13 form")
    for a in [a for a in node.attribute if a.name == "noop_with_empty_axes"]:
        node.attribute.remove(a)
    del node.input[1:]
    if axes.size:  # none: reduce every axis, which v13 does without the attribute
        node.attribute.append(helper.make_attribute("axes", [int(a) for a in axes]))
    return True


LOWERINGS: dict[tuple[str, int, int], Callable[[onnx.NodeProto, _Ctx], bool]] = {  # (op, from, to): any other refused
    ("Split", 18, 13): _lower_split, ("Pad", 18, 13): _lower_pad, **{(op, 18, 13): _lower_reduce for op in REDUCE_18}}


def _since(op: str, opset: int) -> int | None:
    try:
        return defs.get_schema(op, opset, "").since_version
    except defs.SchemaError:
        return None


def _lower(model: onnx.ModelProto, src: int, dst: int, skip: set[str]) -> tuple[dict[str, int], int]:
    """Every default-domain node in its opset-`dst` form: (nodes per op whose version changed, how many edited)."""
    ctx, done, rewritten = _Ctx(model, src), dict[str, int](), 0
    for node in model.graph.node:
        if node.domain not in _DEFAULT or node.op_type in skip:
            continue
        have, want = _since(node.op_type, src), _since(node.op_type, dst)
        if have is not None and have == want:
            continue
        how = LOWERINGS.get((node.op_type, have or 0, want or 0))
        if how is None:  # also a default-domain op ONNX does not define (have is None)
            raise ValueError(f"{node.op_type} (node {node.name!r}) is version {have} at opset {src} and "
                             f"{f'version {want}' if want else 'absent'} at opset {dst}: no lowering for it")
        rewritten += how(node, ctx)
        done[node.op_type] = done.get(node.op_type, 0) + 1
    return dict(sorted(done.items())), rewritten


def _add(nodes: list[onnx.NodeProto], origin: onnx.NodeProto, prefix: str, step: str, op: str, ins: list[str],
         out: str | None = None, **attr: Any) -> str:
    """Append one node of a decomposition, named `prefix + step`; returns its output."""
    new = helper.make_node(op, ins, [out or prefix + step], name=prefix + step, **attr)
    new.metadata_props.extend(origin.metadata_props)  # the original's provenance (namespace, stack trace)
    nodes.append(new)
    return new.output[0]


def _decompose(model: onnx.ModelProto, opset: int) -> None:
    """Each LayerNormalization as mean, centre, variance, + epsilon, sqrt, divide, scale and shift."""
    ctx, nodes = _Ctx(model, opset), []
    for i, node in enumerate(model.graph.node):
        if node.op_type != "LayerNormalization" or node.domain not in _DEFAULT:
            nodes.append(node)
            continue
        name, (x, scale, *bias), attrs = node.name or f"LayerNormalization_{i}", node.input, _attrs(node)
        bias, axis, (elem, dims) = [b for b in bias if b], attrs.get("axis", -1), ctx.types.get(x, (0, None))
        # stash_type 1 computes in fp32, as these ops do for an fp32 input; Mean/InvStdDev are training outputs
        if elem != TensorProto.FLOAT or any(node.output[1:]) or (axis >= 0 and dims is None):
            raise ValueError(f"LayerNormalization {name!r}: decomposed only with a float32 input (of known rank "
                             "for axis >= 0) and the Y output alone")
        axes = list(range(axis - len(dims or []) if axis >= 0 else axis, 0))  # the normalised (trailing) dims
        p = f"{name}{DECOMPOSED}"
        eps = ctx.add_init(f"{p}epsilon", np.array([attrs.get("epsilon", 1e-5)], np.float32))
        # ReduceMean takes axes as an attribute up to opset 17 and as an input from 18
        kw: dict[str, Any] = {"keepdims": 1} if opset >= 18 else {"keepdims": 1, "axes": axes}
        ax = [ctx.add_init(f"{p}axes", np.array(axes, np.int64))] if opset >= 18 else []
        add = partial(_add, nodes, node, p)
        centred = add("centred", "Sub", [x, add("mean", "ReduceMean", [x, *ax], **kw)])
        var = add("variance", "ReduceMean", [add("square", "Mul", [centred, centred]), *ax], **kw)
        normed = add("normed", "Div", [centred, add("std", "Sqrt", [add("variance_eps", "Add", [var, eps])])])
        scaled = add("scaled", "Mul", [normed, scale], None if bias else node.output[0])
        if bias:
            add("shifted", "Add", [scaled, bias[0]], node.output[0])
    _set_nodes(model.graph, nodes)


def _topk_initializers(model: onnx.ModelProto, opset: int) -> int:
    """Point every TopK's K at an int64 [1] initializer; returns how many were rewired. 8.5-GA
    docs/operators.md, TopK: "`K` input must be an initializer" (8.6-GA drops it): a Constant is not one."""
    ctx, rewired, folded = _Ctx(model, opset), 0, set()
    for node in (n for n in model.graph.node if n.op_type == "TopK" and n.domain in _DEFAULT):
        t = ctx.inits.get(node.input[1])
        if t is not None and t.data_type == TensorProto.INT64 and list(t.dims) == [1]:
            continue  # already what the parser wants (our exports)
        k = ctx.value(node.input[1])
        if k is None or k.size != 1:
            raise ValueError(f"TopK {node.name!r}: K ({node.input[1]}) is not a compile-time constant of one value; "
                             "TensorRT 8.5 needs it as an initializer")
        folded.add(node.input[1])
        node.input[1] = ctx.add_init(f"{node.name or 'TopK'}/K", k.astype(np.int64).reshape(1))
        rewired += 1
    while folded:  # what only fed K (a Constant node, a folded chain) is dead now: drop that, nothing else
        used = {i for n in model.graph.node for i in n.input} | {o.name for o in model.graph.output}
        dead = {j for j, n in enumerate(model.graph.node) if set(n.output) & folded and not set(n.output) & used}
        folded = {i for j in dead for i in model.graph.node[j].input if i}
        if dead:
            _set_nodes(model.graph, [n for j, n in enumerate(model.graph.node) if j not in dead])
    return rewired


def layernorm_island(model: onnx.ModelProto) -> set[str]:
    """Names of the nodes the decomposed LayerNormalizations became (fp16 keeps them in fp32, as the op)."""
    return {n.name for n in model.graph.node if DECOMPOSED in n.name}


def for_parser(model: onnx.ModelProto, max_opset: int, layernorm: str,
               topk_k_initializer: bool) -> tuple[onnx.ModelProto, dict]:
    """A copy of `model` that TensorRT 8.5/8.6's ONNX parser takes, and a record of what was rewritten."""
    if layernorm not in LAYERNORM_MODES:
        raise ValueError(f"layernorm must be one of {LAYERNORM_MODES}, got {layernorm!r}")
    # the dynamo exporter inlines everything; a function or If/Loop body would escape the lowering
    if model.functions or any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS)
                              for n in model.graph.node for a in n.attribute):
        raise ValueError("model-local functions and subgraphs (If/Loop/Scan bodies) are not lowered")
    src = next((o.version for o in model.opset_import if o.domain in _DEFAULT), 1)  # none: opset 1, per the spec
    # 8.5-GA / 8.6-GA docs/operators.md: "TensorRT 8.5 [8.6] supports operators up to Opset 17"
    out, dst = onnx.ModelProto(), min(src, max_opset)
    out.CopyFrom(model)  # a copy: the caller's model is not touched
    lowered, rewritten = _lower(out, src, dst, {"LayerNormalization"} if layernorm == "decomposed" else set())
    for o in out.opset_import:
        if o.domain in _DEFAULT:
            o.version = dst
    ln = sum(n.op_type == "LayerNormalization" and n.domain in _DEFAULT for n in out.graph.node)
    if layernorm == "decomposed":
        _decompose(out, dst)
    rewired = _topk_initializers(out, dst) if topk_k_initializer else 0
    return out, {"opset": dst, "converted_from_opset": src if dst != src else None, "lowered": lowered,
                 "lowered_rewritten": rewritten, "layernorm": layernorm, "layernorm_nodes": ln,
                 "topk_k": "initializer" if topk_k_initializer else "as exported", "topk_k_rewired": rewired}
