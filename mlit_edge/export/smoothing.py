"""SmoothQuant-style activation smoothing: an exact fp32 rewrite of an exported mLiT that moves the activations'
outlier channels into the weights before INT8 quantization (Xiao et al., 2023, arXiv:2211.10438).

A weighted MatMul/Gemm computes X W. For a per-input-channel s > 0, X W = (X / s)(s W): the activation is divided
by s where it is produced and the weight's rows are multiplied by s, so a per-tensor INT8 range no longer spends
its 256 steps on a few large channels. s_j = max|X_j|^a / max|W_j|^(1-a) (a: `alpha`), max|X_j| from the
calibration images. Three producers allow the division exactly:

- a LayerNormalization: its scale and bias are divided by s; every linear that reads it (the attention's q/k/v,
  the MoE's input projection and the router, which therefore computes the same gate logits) gets s on its rows;
- the MoE's `(sum_e g_e silu(x W_e + b_e)) * (x V + c)` before W2: V's columns and c are divided by s;
- attention's `softmax(q k^T) v` before the output projection: the value projection's columns are divided by s,
  one s per value channel shared by the query heads of its group.

The last two are found by following each column of the producing linear through Reshape/Transpose/Split/Gather,
the activation-by-activation MatMul and the Mul, to the channel of the consumer's input it becomes
(`channel_trace.column_map`); a column whose path is nonlinear in itself is never scaled. `smooth` checks the rewrite on the
first `CHECKED` calibration images (logits and every TopK's experts) and refuses one that is not exact. Both INT8
recipes smooth at a=0.8 (`int8_recipe.ONNXRUNTIME`, `int8_recipe.TENSORRT`). A LayerNorm decomposed for TensorRT 8.5
(legacy_graph) is not a LayerNormalization node and is left as it is.
"""
from __future__ import annotations

from typing import Iterator, NamedTuple

import numpy as np

from .int8_recipe import float_nodes
from .channel_trace import array as _array, attr as _attr, column_map, intermediates, shapes_at_batch1

LINEARS = ("MatMul", "Gemm")
TOLERANCE = 1e-5
CHECKED = 128  # images the rewrite is checked exact on


class Site(NamedTuple):
    """One smoothing place: the tensor X whose channels are divided by s, and how to rewrite its two sides."""

    kind: str  # "layernorm" or "columns"
    tensor: str  # X: the activation measured (channels on its last axis)
    producer: str  # the LayerNormalization, or the linear whose columns are divided by s
    consumers: tuple[str, ...]  # the linears whose rows are multiplied by s
    channels: np.ndarray | None  # "columns": the producer's column feeding each channel of X


def _inits(model) -> dict:
    return {t.name: t for t in model.graph.initializer}


def _set(model, name: str, value: np.ndarray) -> None:
    from onnx import numpy_helper

    init = _inits(model)[name]
    init.CopyFrom(numpy_helper.from_array(value.astype(np.float32), name))


def _row_axis(node) -> int:
    """The axis of a linear's weight that runs over its input channels."""
    return 1 if node.op_type == "Gemm" and _attr(node, "transB", 0) else 0


def _weighted(node, inits: dict, uses: dict) -> bool:
    """A MatMul/Gemm whose second input is a weight of its own (scaling it touches nothing else)."""
    return (node.op_type in LINEARS and len(node.input) > 1 and node.input[1] in inits and uses[node.input[1]] == 1
            and not (node.op_type == "Gemm" and _attr(node, "transA", 0)))


def _uses(model) -> dict:
    uses: dict = {}
    for node in model.graph.node:
        for i in node.input:
            uses[i] = uses.get(i, 0) + 1
    return uses


def _readers(model) -> dict:
    readers: dict = {}
    for node in model.graph.node:
        for i in node.input:
            readers.setdefault(i, []).append(node)
    return readers


def _own_norm_weights(model) -> None:
    """Give each LayerNorm a scale and bias of its own: an exporter shares equal initializers (a random model's
    ones and zeros), and each LayerNorm gets its own s."""
    uses = _uses(model)
    for ln in model.graph.node:
        if ln.op_type != "LayerNormalization":
            continue
        for j in (1, 2):
            name = ln.input[j] if len(ln.input) > j else ""
            if name and uses.get(name, 0) > 1 and name in _inits(model):
                ln.input[j] = f"{name}/{ln.name}"
                _add(model, ln.input[j], _array(model, name))


def _add(model, name: str, value: np.ndarray) -> None:
    from onnx import numpy_helper

    model.graph.initializer.append(numpy_helper.from_array(value, name))


def _layernorm_sites(model) -> list[Site]:
    """Each LayerNormalization (last axis, scale and bias weights of its own) read only by weighted linears,
    directly or through a Reshape that keeps the channel axis and a Gather that picks tokens."""
    inits, uses, readers = _inits(model), _uses(model), _readers(model)
    sites = []
    for ln in model.graph.node:
        if ln.op_type != "LayerNormalization" or _attr(ln, "axis", -1) != -1 or len(ln.input) < 3:
            continue
        if any(i not in inits or uses[i] != 1 for i in ln.input[1:3]):
            continue
        dim = _array(model, ln.input[1]).size
        consumers, todo, ok = [], [(ln.output[0], 2)], True
        while todo and ok:
            tensor, rank = todo.pop()
            for node in readers.get(tensor, []):
                if _weighted(node, inits, uses) and node.input[0] == tensor:
                    consumers.append(node.name)
                elif node.op_type == "Reshape" and int(_array(model, node.input[1])[-1]) == dim:
                    todo.append((node.output[0], len(_array(model, node.input[1]))))
                elif node.op_type == "Gather" and _attr(node, "axis", 0) % rank != rank - 1:
                    todo.append((node.output[0], rank - 1 + _array(model, node.input[1]).ndim))
                else:
                    ok = False
        if ok and consumers:
            sites.append(Site("layernorm", ln.output[0], ln.name, tuple(consumers), None))
    return sites


def _column_sites(model, skip: set) -> list[Site]:
    """Each weighted linear (not in `skip`) whose input is the linear image, channel by channel, of the columns
    of the nearest weighted linear above it (the attention's value projection, the MoE's V)."""
    inits, uses = _inits(model), _uses(model)
    producers = {o: n for n in model.graph.node for o in n.output}
    shapes = shapes_at_batch1(model)
    sites = []
    for node in model.graph.node:
        if not _weighted(node, inits, uses) or node.name in skip:
            continue
        seen, todo, candidates = set(), [node.input[0]], []
        while todo:  # back to the nearest weighted linears, not past a LayerNorm or the residual Add
            src = producers.get(todo.pop())
            if src is None or src.name in seen or src.op_type in ("LayerNormalization", "Add"):
                continue
            seen.add(src.name)
            if _weighted(src, inits, uses):
                candidates.append(src)
            else:
                todo.extend(i for i in src.input if i and i not in inits)
        for src in candidates:
            shape = shapes.get(src.output[0])
            if not shape or 0 in shape:
                continue
            channels = column_map(model, src, node.input[0], shapes)
            if channels is not None:
                sites.append(Site("columns", node.input[0], src.name, (node.name,), channels))
                break
    return sites


def _run(model, images: np.ndarray, names: list[str], batch: int = 64) -> list[list[np.ndarray]]:
    """`names` (graph outputs or not) computed by ONNX Runtime on `images`, batch by batch."""
    return list(_batches(model, images, names, batch))


def _batches(model, images: np.ndarray, names: list[str], batch: int = 64) -> Iterator[list[np.ndarray]]:
    """`_run` one batch at a time, so that a caller can keep what it reduces them to and not every tensor."""
    return intermediates(model, names, (images[i:i + batch] for i in range(0, len(images), batch)))


def _scales(xmax: np.ndarray, wmax: np.ndarray, alpha: float) -> np.ndarray:
    s = np.power(np.maximum(xmax, 1e-5), alpha) / np.power(np.maximum(wmax, 1e-5), 1 - alpha)
    return np.where(xmax > 0, s, 1.0).astype(np.float64)


def _row_max(model, node, rows: int) -> np.ndarray:
    """max |W| of each input channel's row of a linear's weight."""
    w = np.abs(_array(model, node.input[1]))
    return w.max(axis=1 - _row_axis(node)) if w.ndim == 2 else np.ones(rows)


def _scale_rows(model, node, s: np.ndarray) -> None:
    w = _array(model, node.input[1]).astype(np.float64)
    _set(model, node.input[1], w * (s[:, None] if _row_axis(node) == 0 else s[None, :]))


def smooth(model, images: np.ndarray, alpha: float = 0.5, keep: set | None = None):
    """The smoothed copy of fp32 `model` (ModelProto) and its record, from the channels' ranges on `images`
    (the calibration set, as the graph's input takes it). `keep`: linears whose weight ranges do not set s (the
    float router). A ValueError when the rewrite does not compute the same logits (<= 1e-5) and experts."""
    import onnx

    if not 0.0 < alpha < 1.0:
        raise ValueError(f"smoothing alpha {alpha}: choose a value between 0 and 1")
    keep = keep or set()
    out = onnx.ModelProto()
    out.CopyFrom(model)
    _own_norm_weights(out)
    sites = _layernorm_sites(out)
    sites += _column_sites(out, keep | {c for s in sites for c in s.consumers})
    topk = [n.output[1] for n in out.graph.node if n.op_type == "TopK"]
    checked = [out.graph.output[0].name, *topk]
    xmax: list = [None] * len(sites)
    before = []  # only the logits and experts of each batch are kept: every site's tensors took 0.6 GB on 512 images
    for r in _batches(out, images, [s.tensor for s in sites] + checked):
        for i in range(len(sites)):
            m = np.abs(r[i]).reshape(-1, r[i].shape[-1]).max(0)
            xmax[i] = m if xmax[i] is None else np.maximum(xmax[i], m)
        before.append(r[len(sites):])
    nodes = {n.name: n for n in out.graph.node}
    for site, x in zip(sites, xmax):
        rows = [nodes[c] for c in site.consumers]
        if site.kind == "layernorm":
            quantized = [r for r in rows if r.name not in keep] or rows
            s = _scales(x, np.max([_row_max(out, r, x.size) for r in quantized], axis=0), alpha)
            ln = nodes[site.producer]
            for name in ln.input[1:3]:
                _set(out, name, _array(out, name).astype(np.float64) / s)
        else:
            cols, wrow = site.channels, _row_max(out, rows[0], x.size)
            s_col = np.ones(int(_shapes_last(out, nodes[site.producer])))
            for c in np.unique(cols):
                s_col[c] = _scales(x[cols == c].max(keepdims=True), wrow[cols == c].max(keepdims=True), alpha)[0]
            producer = nodes[site.producer]
            w = _array(out, producer.input[1]).astype(np.float64)
            _set(out, producer.input[1], w / (s_col[None, :] if _row_axis(producer) == 0 else s_col[:, None]))
            if producer.op_type == "Gemm" and len(producer.input) > 2 and producer.input[2] in _inits(out):
                _set(out, producer.input[2], _array(out, producer.input[2]).astype(np.float64) / s_col)
            s = s_col[cols]
        for r in rows:
            _scale_rows(out, r, s)
    # the rewrite is exact algebra: its check on the first CHECKED images costs a quarter of a pass over 512
    after = _run(out, images[:CHECKED], checked)
    before = before[:len(after)]  # both batch by batch, 64 at a time
    # fp32 rounding is relative: the bound is 1e-5 of the logits' size where they exceed 1
    scale = max(1.0, max(float(np.abs(b[0]).max()) for b in before))
    err = max(float(np.abs(a[0] - b[0]).max()) for a, b in zip(before, after)) / scale
    flips = sum(int(np.any(np.sort(a[k], -1) != np.sort(b[k], -1), -1).sum()) for a, b in zip(before, after)
                for k in range(1, len(checked)))
    if err > TOLERANCE or flips:
        raise ValueError(f"activation smoothing changed the fp32 graph (max logit change {err:.2e} of their size, {flips} tokens "
                         "routed to other experts): not exact, not applied")
    kinds = [s.kind for s in sites]
    return out, {"alpha": alpha, "layernorms": kinds.count("layernorm"), "value_columns": kinds.count("columns"),
                 "max_abs_logit_change": float(f"{err:.3g}")}


def _shapes_last(model, node) -> int:
    """Columns of a linear's output: its weight's output axis."""
    return _array(model, node.input[1]).shape[1 - _row_axis(node)]


def apply(model, recipe, images: np.ndarray):
    """`model` smoothed as the INT8 `recipe` asks (itself when `recipe.smooth` is None) and the record of it for
    the sidecar (None when not smoothed). The linears the recipe keeps in float do not set the scales."""
    if recipe.smooth is None:
        return model, None
    return smooth(model, images, recipe.smooth, float_nodes(model, recipe))
