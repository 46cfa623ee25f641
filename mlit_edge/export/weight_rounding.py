"""Error-compensating rounding of an INT8 graph's weights (GPTQ: Frantar et al., 2023, "GPTQ: Accurate
Post-Training Quantization for Generative Pre-trained Transformers", arXiv:2210.17323).

Rounding each weight to its nearest INT8 step minimises each weight's own error, not the error of what the layer
computes. GPTQ rounds one input channel at a time and moves what that rounding lost onto the channels not yet
rounded, weighted by how the layer's inputs correlate (H = X^T X over the calibration images), so that X W_q stays
close to X W. The scales, zero points, nodes and biases of the quantized graph are kept: only the INT8 weight
values change, so the graph runs the same kernels at the same speed, and an image's answer still does not depend
on its batch. Both INT8 recipes use it (`int8_recipe.Int8Recipe.rounding`); on the XXS it lifts the worst layer's
expert agreement by 0.003-0.004 in both flavours, to 0.982 (docs/measurements.md, "INT8 sensitivity").
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from ..base.progress import progress
from .channel_trace import attr, intermediates

DAMP = 0.01  # added to H's diagonal, as a share of its mean: GPTQ's default, which keeps H invertible
QMAX = 127  # symmetric INT8 weights (ONNX Runtime's and TensorRT's): -127..127


class Target(NamedTuple):
    """One weighted matmul of a QDQ graph: its weight's DequantizeLinear and the layout of that weight."""

    dequantize: object  # the weight's DequantizeLinear node
    matmul: object  # the MatMul/Gemm reading it as input B
    transposed: bool  # the weight is stored (N, K) (Gemm transB=1), else (K, N)


def targets(quantized) -> list[Target]:
    """The weighted MatMul/Gemm nodes whose weight is a per-output-channel INT8 initializer behind a
    DequantizeLinear, in graph order."""
    from onnx import TensorProto

    inits = {t.name: t for t in quantized.graph.initializer}
    readers: dict[str, list] = {}
    for node in quantized.graph.node:
        for name in node.input:
            readers.setdefault(name, []).append(node)
    found = []
    for node in quantized.graph.node:
        if node.op_type != "DequantizeLinear" or node.input[0] not in inits:
            continue
        if inits[node.input[0]].data_type != TensorProto.INT8 or len(inits[node.input[0]].dims) != 2:
            continue  # read from the proto: the values are converted once, by `apply`
        for user in readers.get(node.output[0], []):
            if user.op_type in ("MatMul", "Gemm") and len(user.input) > 1 and user.input[1] == node.output[0]:
                found.append(Target(node, user, bool(attr(user, "transB", 0))))
    return found


def input_hessians(quantized, names: list[str], batches: list[np.ndarray]) -> dict[str, np.ndarray]:
    """H = X^T X / rows of each tensor in `names` (channels on its last axis), as the quantized graph computes
    them on `batches` (the quantizer's calibration batches): each matmul's input as its INT8 kernel will see it."""
    sums: dict[str, np.ndarray] = {}
    rows: dict[str, int] = {}
    with progress("weight rounding pass", sum(map(len, batches))) as shown:
        for batch, outputs in zip(batches, intermediates(quantized, names, batches)):
            for name, x in zip(names, outputs):
                x = x.reshape(-1, x.shape[-1]).astype(np.float64)
                sums[name] = sums.get(name, 0) + x.T @ x
                rows[name] = rows.get(name, 0) + len(x)
            shown.advance(len(batch))
    return {n: sums[n] / rows[n] for n in sums}


def round_weights(w: np.ndarray, scale: np.ndarray, h: np.ndarray, damp: float = DAMP) -> np.ndarray:
    """The INT8 values (N, K) for float weights `w` (N, K) on per-row steps `scale` (N,) that keep `x @ w.T`
    closest to the float layer's for inputs of second moment `h` (K, K): GPTQ, input channels taken in order of
    decreasing energy (its "act-order"), errors carried through the Cholesky factor of H's inverse."""
    w = w.astype(np.float64).copy()
    h = h.astype(np.float64).copy()
    silent = np.diag(h) == 0  # a channel no calibration image reaches: its weights never matter
    h[silent, silent] = 1.0
    w[:, silent] = 0.0
    order = np.argsort(-np.diag(h), kind="stable")
    w, h = w[:, order], h[np.ix_(order, order)]
    h[np.diag_indices_from(h)] += damp * float(np.mean(np.diag(h)))
    upper = np.linalg.cholesky(np.linalg.inv(h)).T
    q = np.empty_like(w)
    step = scale.astype(np.float64)
    for j in range(w.shape[1]):
        q[:, j] = np.clip(np.round(w[:, j] / step), -QMAX, QMAX)
        lost = (w[:, j] - q[:, j] * step) / upper[j, j]
        w[:, j + 1:] -= np.outer(lost, upper[j, j + 1:])
    out = np.empty_like(q)
    out[:, order] = q
    return out.astype(np.int8)


def output_error(w: np.ndarray, q: np.ndarray, scale: np.ndarray, h: np.ndarray) -> float:
    """Mean squared error per row of the layer's output, E||x (q*scale - w)^T||^2 / N, for inputs of moment h."""
    d = q.astype(np.float64) * scale[:, None] - w
    return float(np.einsum("nk,kl,nl->", d, h, d) / len(w))


def float_weights(fp32) -> dict[str, np.ndarray]:
    """Each MatMul/Gemm's float weight (input B, an initializer) by node name, taken before quantization (ONNX
    Runtime's quantizer moves the initializers of the graph it is given to external data it later deletes)."""
    from onnx import numpy_helper

    inits = {t.name: t for t in fp32.graph.initializer}
    return {n.name: numpy_helper.to_array(inits[n.input[1]]).copy() for n in fp32.graph.node
            if n.op_type in ("MatMul", "Gemm") and len(n.input) > 1 and n.input[1] in inits}


def apply(quantized, weights: dict[str, np.ndarray], batches: list[np.ndarray]) -> dict:
    """Re-round, in place, the INT8 weights of every weighted matmul of `quantized` (a QDQ graph that kept its
    source's node names) from `weights` (`float_weights` of the source), with the layers' inputs on `batches`;
    returns what a sidecar records: how many matmuls, and the summed output error of nearest and of this
    rounding on the calibration images."""
    from onnx import numpy_helper

    inits = {t.name: t for t in quantized.graph.initializer}
    todo = [t for t in targets(quantized) if t.matmul.name in weights]
    moments = input_hessians(quantized, list(dict.fromkeys(t.matmul.input[0] for t in todo)), batches)
    before = after = 0.0
    done = 0
    for t in todo:
        stored = weights[t.matmul.name]
        w = stored if t.transposed else stored.T  # (N, K)
        scale = numpy_helper.to_array(inits[t.dequantize.input[1]]).astype(np.float64).reshape(-1)
        old = numpy_helper.to_array(inits[t.dequantize.input[0]])
        if scale.size != len(w) or old.shape != stored.shape:
            continue  # a per-tensor or reshaped weight: not the per-channel form this rounds
        h = moments[t.matmul.input[0]]
        new = round_weights(w, scale, h)
        before += output_error(w, old if t.transposed else old.T, scale, h)
        after += output_error(w, new, scale, h)
        stored_new = new if t.transposed else np.ascontiguousarray(new.T)
        inits[t.dequantize.input[0]].CopyFrom(numpy_helper.from_array(stored_new, t.dequantize.input[0]))
        done += 1
    return {"method": "GPTQ (error-compensating rounding, act-order)", "matmuls": done,
            "output_error_nearest": float(f"{before:.4g}"), "output_error": float(f"{after:.4g}")}
