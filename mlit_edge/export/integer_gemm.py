"""The INT8 matmuls of the int8-ort graph written as ONNX Runtime's MatMulIntegerToFloat, the MoE's split apart.

The quantizer writes each weighted MatMul and Gemm as Q/DQ around a float node, and ONNX Runtime's optimizer
picks the kernel. For a Gemm with a bias it picks QGemm, which with a float output first copies the int32 bias
into every row of its output on one thread, then accumulates the integer product onto it
(onnxruntime/contrib_ops/cpu/quantization/qgemm.cc: `GemmBroadcastBias` before `MlasGemmBatch`). At batch 64
that is 9280 rows of 324 for the XXS's expert input projection. MatMulIntegerToFloat (com.microsoft) runs the
same u8s8 integer GEMM and applies the per-channel scale and a float bias as each tile is written: 1.16-1.30x
QGemm's speed at 9280 x 108 x 108 and 1.11-1.13x at 9280 x 108 x 324 (`benchmarks/int8_kernels.py`, two runs). A residual MatMul followed by an Add is fused back into a Gemm on dequantized
weights before any Q/DQ fusion, a float kernel whose rounding changes with the batch. Written here, every INT8
matmul runs the integer kernel, whatever ONNX Runtime's fusions do.

`split_outputs` then writes the MoE's input projection, whose product the graph reshapes and splits into the
experts' part and V, as one MatMulIntegerToFloat per part: the same values, bit for bit, without the Split's
copy of the whole product: 1.52-1.68x the speed of one matmul and the Split at 9280 x 108 x (243 + 81), the
same script.

The arithmetic stays what calibration fixed: the same uint8 activation and its scale, the same int8 weights and
per-channel scales, and a Gemm's bias as its int32 bias dequantized, added in float after the integer product
instead of before its scaling (the two differ by float rounding, a few 1e-7 of an output). Integer products are
exact, so an image's logits still do not depend on its batch.
"""
from __future__ import annotations

import numpy as np

from .channel_trace import attr

CONTRIB = "com.microsoft"


def integer_kernels(model) -> None:
    """What the int8-ort maker applies, in place: every INT8 matmul as MatMulIntegerToFloat (`integer_gemms`),
    then the MoE's input projection in parts (`split_outputs`)."""
    if integer_gemms(model):
        split_outputs(model)


def integer_gemms(model) -> int:
    """Rewrite, in place, each MatMul or Gemm of `model` that reads a dequantized uint8 activation (per-tensor) and
    a dequantized 2-D int8 weight, and for a Gemm no bias or a constant one (dequantized int32, or float), as a
    MatMulIntegerToFloat of the same name and output; drops what only those nodes read. Returns how many."""
    from onnx import TensorProto, helper, numpy_helper

    graph = model.graph
    inits = {t.name: t for t in graph.initializer}
    made_by = {o: n for n in graph.node for o in n.output}

    def dequantized(name: str, dtype: int):
        node = made_by.get(name)
        if node is None or node.op_type != "DequantizeLinear" or len(node.input) < 3:
            return None
        if dtype == TensorProto.UINT8:  # the activation: Q's output, per-tensor scale and zero point
            scale, zero = (inits.get(n) for n in node.input[1:3])
            ok = scale is not None and zero is not None and zero.data_type == dtype and not scale.dims
            return node if ok else None
        return node if all(n in inits for n in node.input[:3]) and inits[node.input[0]].data_type == dtype else None

    def array(name: str) -> np.ndarray:
        return numpy_helper.to_array(inits[name])

    added, rewritten = [], 0
    nodes = []
    for node in graph.node:
        matmul = node.op_type in ("Gemm", "MatMul")
        act = dequantized(node.input[0], TensorProto.UINT8) if matmul else None
        weight = dequantized(node.input[1], TensorProto.INT8) if act is not None else None
        plain = attr(node, "alpha", 1.0) == 1.0 and attr(node, "beta", 1.0) == 1.0 and not attr(node, "transA", 0)
        if weight is None or not plain or len(inits[weight.input[0]].dims) != 2:
            nodes.append(node)
            continue
        bias = _bias(node, made_by, inits, array) if node.op_type == "Gemm" else None
        if bias is False:  # a bias this rewrite does not read (an activation, a 2-D C): the Gemm stays
            nodes.append(node)
            continue
        q, scale, zero = array(weight.input[0]), array(weight.input[1]), array(weight.input[2])
        transposed = bool(attr(node, "transB", 0))
        axis = attr(weight, "axis", 1)
        columns = q.shape[0] if transposed else q.shape[1]
        # per-channel along the other axis, or a bias broadcast from one value: not a form this kernel takes
        if (axis != (0 if transposed else 1) and scale.size > 1) or (bias is not None and bias.size != columns):
            nodes.append(node)
            continue
        base = node.name or node.output[0]
        w_name, s_name, z_name = f"{base}_B_int8", f"{base}_B_scale", f"{base}_B_zero_point"
        added += [numpy_helper.from_array(np.ascontiguousarray(q.T if transposed else q), w_name),
                  numpy_helper.from_array(scale.reshape(-1).astype(np.float32), s_name),
                  numpy_helper.from_array(zero.reshape(-1).astype(np.int8), z_name)]
        inputs = [act.input[0], w_name, act.input[1], s_name, act.input[2], z_name]
        if bias is not None:
            added.append(numpy_helper.from_array(bias, f"{base}_bias"))
            inputs.append(f"{base}_bias")
        nodes.append(helper.make_node("MatMulIntegerToFloat", inputs, list(node.output), name=node.name,
                                      domain=CONTRIB))
        rewritten += 1
    if not rewritten:
        return 0
    del graph.node[:]
    graph.node.extend(nodes)
    graph.initializer.extend(added)
    _drop_unread(model)
    if not any(o.domain == CONTRIB for o in model.opset_import):
        model.opset_import.append(helper.make_opsetid(CONTRIB, 1))
    return rewritten


def _bias(node, made_by: dict, inits: dict, array):
    """The Gemm's bias as a float32 vector, None where it has none, False where it is not a constant vector."""
    if len(node.input) < 3 or not node.input[2]:
        return None
    name = node.input[2]
    if name in inits:
        value = array(name).astype(np.float32)
    else:
        dq = made_by.get(name)
        if dq is None or dq.op_type != "DequantizeLinear" or not all(n in inits for n in dq.input[:3]):
            return False
        q, scale, zero = (array(n) for n in dq.input[:3])
        value = ((q.astype(np.int64) - zero.astype(np.int64)) * scale.astype(np.float64)).astype(np.float32)
    return value if value.ndim == 1 else False


def _drop_unread(model) -> None:
    """Remove the nodes (DequantizeLinear) and initializers nothing reads any more, outputs excepted."""
    graph = model.graph
    wanted = {o.name for o in graph.output}
    while True:
        read = wanted | {i for n in graph.node for i in n.input}
        dead = [n for n in graph.node if n.op_type == "DequantizeLinear" and not set(n.output) & read]
        if not dead:
            break
        for n in dead:
            graph.node.remove(n)
    read = wanted | {i for n in graph.node for i in n.input}
    keep = [t for t in graph.initializer if t.name in read]
    del graph.initializer[:]
    graph.initializer.extend(keep)


def split_outputs(model) -> int:
    """Rewrite, in place, each MatMulIntegerToFloat whose product is only reshaped to (-1, G, C) and split along G
    (the MoE's input projection: `[W_1 ... W_E | V]`, `static.StaticMoE`) as one MatMulIntegerToFloat per part,
    each reshaped to its (-1, g, C): the same columns, scales and biases, so the same values, without the copy
    the Split makes of the whole product. Returns how many were split."""
    from onnx import helper, numpy_helper

    graph = model.graph
    inits = {t.name: t for t in graph.initializer}
    readers: dict[str, list] = {}
    for node in graph.node:
        for name in node.input:
            readers.setdefault(name, []).append(node)

    def constant(name: str):
        return numpy_helper.to_array(inits[name]) if name in inits else None

    replace: dict[str, list] = {}  # the name of a node to drop -> the nodes standing in its place (or [])
    added = []
    for node in graph.node:
        alone = len(readers.get(node.output[0], [])) == 1
        if node.op_type != "MatMulIntegerToFloat" or node.domain != CONTRIB or not alone:
            continue
        reshape = readers[node.output[0]][0]
        shape = constant(reshape.input[1]) if reshape.op_type == "Reshape" and len(reshape.input) > 1 else None
        split = readers.get(reshape.output[0], [None])
        split = split[0] if len(split) == 1 else None
        if shape is None or shape.tolist()[:1] != [-1] or len(shape) != 3 or split is None or split.op_type != "Split":
            continue
        sizes = constant(split.input[1]) if len(split.input) > 1 else None
        weight = constant(node.input[1])
        if (attr(split, "axis") not in (1, -2) or sizes is None or weight is None
                or int(sizes.sum()) != shape[1] or weight.shape[1] != shape[1] * shape[2]):
            continue
        scale, zero = constant(node.input[3]), constant(node.input[5])
        bias = constant(node.input[6]) if len(node.input) > 6 and node.input[6] else None
        parts, start = [], 0
        for k, (size, out) in enumerate(zip(sizes.tolist(), split.output)):
            cols = slice(start * shape[2], (start + size) * shape[2])
            start += size
            part = f"{node.name}_part{k}"
            values = {"B": weight[:, cols], "scale": scale[cols] if scale.size > 1 else scale,
                      "zero_point": zero[cols] if zero.size > 1 else zero,
                      **({"bias": bias[cols]} if bias is not None else {}),
                      "shape": np.array([-1, size, shape[2]], np.int64)}
            added += [numpy_helper.from_array(np.ascontiguousarray(v), f"{part}_{what}") for what, v in values.items()]
            inputs = [node.input[0], f"{part}_B", node.input[2], f"{part}_scale", node.input[4], f"{part}_zero_point"]
            parts += [helper.make_node("MatMulIntegerToFloat", inputs + ([f"{part}_bias"] if bias is not None else []),
                                       [f"{part}_y"], name=part, domain=CONTRIB),
                      helper.make_node("Reshape", [f"{part}_y", f"{part}_shape"], [out],
                                       name=f"{reshape.name}_part{k}")]
        replace.update({node.name: parts, reshape.name: [], split.name: []})
    if not replace:
        return 0
    nodes = [new for node in graph.node for new in replace.get(node.name, [node])]
    del graph.node[:]
    graph.node.extend(nodes)
    graph.initializer.extend(added)
    _drop_unread(model)
    return sum(1 for parts in replace.values() if parts)
