"""Where each column of a linear's output goes: the index of every element carried through the shape ops, the
activation-by-activation MatMul, the Mul and ONNX Runtime's Attention exactly as they move the data, for the
activation smoothing (smoothing.py) to know which channel of a later linear's input is which column's image; and
the graph's intermediate tensors on real images (`intermediates`), which smoothing, the percentile ranges and the
weight rounding read."""
from __future__ import annotations

from typing import Iterable, Iterator

import numpy as np

THROUGH = ("Reshape", "Transpose", "Split", "Gather", "Squeeze", "Unsqueeze", "Identity")


def array(model, name: str) -> np.ndarray:
    """The value of an initializer or a Constant node's output (a KeyError when `name` is neither)."""
    from onnx import numpy_helper

    init = {i.name: i for i in model.graph.initializer}.get(name)
    if init is not None:
        return numpy_helper.to_array(init)
    for node in model.graph.node:
        if node.op_type == "Constant" and node.output[0] == name:
            return numpy_helper.to_array(node.attribute[0].t)
    raise KeyError(name)


def attr(node, name: str, default=None):
    """A node's attribute value, or `default`."""
    import onnx

    for a in node.attribute:
        if a.name == name:
            return onnx.helper.get_attribute_value(a)
    return default


def column_map(model, producer, target: str, shapes: dict) -> np.ndarray | None:
    """For each channel of `target` (last axis), the column of `producer`'s output whose linear image it is, or
    None where that does not hold for every channel. Each tracked tensor carries the column index of each of its
    elements (`ids`) and the columns it depends on otherwise (`extra`); a MatMul or Mul stays linear in a tracked
    operand only while the other operand depends on none of its columns. `shapes`: each tensor's, at batch 1."""
    shape = shapes[producer.output[0]]
    state = {producer.output[0]: (np.broadcast_to(np.arange(shape[-1]), shape), frozenset())}

    def full(name: str) -> frozenset:
        ids, extra = state.get(name, (None, frozenset()))
        return extra | (frozenset(np.unique(ids).tolist()) if ids is not None else frozenset())

    for node in model.graph.node:
        if target in state:
            break
        if not any(i in state for i in node.input if i):
            continue
        got = [state.get(i, (None, frozenset()))[0] for i in node.input]
        extra = [state.get(i, (None, frozenset()))[1] for i in node.input]
        out, kept = None, frozenset()
        try:
            if node.op_type in THROUGH and got[0] is not None:
                out, kept = _through(model, node, got[0]), extra[0]
            elif node.op_type in ("MatMul", "Mul") and sum(g is not None for g in got[:2]) == 1:
                side = 0 if got[0] is not None else 1
                other = full(node.input[1 - side])
                if not other & frozenset(np.unique(got[side]).tolist()):
                    kept = extra[side] | other
                    if node.op_type == "Mul":
                        out = [np.broadcast_to(got[side], shapes[node.output[0]])]
                    elif side == 1:  # activations x values: each output channel is one value channel
                        out = [np.broadcast_to(got[1][..., :1, :], shapes[node.output[0]])]
            elif node.op_type == "Attention" and got[2] is not None and got[0] is None and got[1] is None:
                other = full(node.input[0]) | full(node.input[1])
                if not other & frozenset(np.unique(got[2]).tolist()):
                    heads, groups = attr(node, "q_num_heads"), attr(node, "kv_num_heads")
                    v = got[2].reshape(*got[2].shape[:-1], groups, -1)  # (B, N, G, C)
                    out = [np.repeat(v, heads // groups, axis=-2).reshape(*got[2].shape[:-1], -1)]  # (B, N, H*C)
                    kept = extra[2] | other
        except (KeyError, ValueError, IndexError, TypeError):
            out = None
        deps = frozenset().union(*(full(i) for i in node.input if i))
        for j, o in enumerate(node.output):
            state[o] = (out[j], kept) if out is not None else (None, deps)
    ids, extra = state.get(target, (None, frozenset()))
    if ids is None:
        return None
    rows = ids.reshape(-1, ids.shape[-1])
    if not np.all(rows == rows[0]) or extra & frozenset(rows[0].tolist()):
        return None
    return rows[0].copy()


def _through(model, node, x: np.ndarray) -> list[np.ndarray]:
    """A column-index array carried through a shape op exactly as the op moves the data."""
    op = node.op_type
    if op == "Reshape":
        target = array(model, node.input[1])
        return [x.reshape([int(d) if d or attr(node, "allowzero", 0) else x.shape[i] for i, d in enumerate(target)])]
    if op == "Transpose":
        return [np.transpose(x, attr(node, "perm"))]
    if op == "Split":
        axis = attr(node, "axis", 0)
        sizes = array(model, node.input[1]) if len(node.input) > 1 and node.input[1] else attr(node, "split")
        if sizes is None:
            return np.split(x, len(node.output), axis=axis)
        return np.split(x, np.cumsum(sizes)[:-1], axis=axis)
    if op == "Gather":
        return [np.take(x, array(model, node.input[1]), axis=attr(node, "axis", 0))]
    if op in ("Squeeze", "Unsqueeze"):
        axes = tuple(int(a) for a in array(model, node.input[1]))
        return [np.squeeze(x, axis=axes) if op == "Squeeze" else np.expand_dims(x, axis=axes)]
    return [x]


def shapes_at_batch1(model) -> dict:
    """Every tensor's shape at batch 1: the graph's inputs, outputs, intermediates and weights."""
    import onnx

    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    del probe.graph.value_info[:]
    dim = probe.graph.input[0].type.tensor_type.shape.dim[0]
    dim.ClearField("dim_param")
    dim.dim_value = 1
    probe = onnx.shape_inference.infer_shapes(probe, data_prop=True)
    shapes = {v.name: tuple(d.dim_value for d in v.type.tensor_type.shape.dim)
              for v in (*probe.graph.value_info, *probe.graph.input, *probe.graph.output)}
    shapes.update({t.name: tuple(t.dims) for t in probe.graph.initializer})
    return shapes


def intermediates(model, names: list[str], batches: Iterable[np.ndarray]) -> Iterator[list[np.ndarray]]:
    """`names` (graph outputs or not) computed by ONNX Runtime on each of `batches` (fed to the graph's first
    input), one batch at a time, so that a caller keeps what it reduces them to and not every tensor. The graph
    runs as written (no optimization), as ONNX Runtime's own calibrators run it."""
    import onnx
    import onnxruntime as ort

    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    present = {o.name for o in probe.graph.output}
    probe.graph.output.extend(onnx.helper.make_empty_tensor_value_info(n) for n in names if n not in present)
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(probe.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    feed = probe.graph.input[0].name
    for batch in batches:
        yield session.run(names, {feed: batch})
