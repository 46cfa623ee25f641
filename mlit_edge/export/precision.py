"""Precision lives in the ONNX: fp16 and INT8-QDQ variants of an fp32 export.

- fp16 (`fp16.to_fp16`): everything converted except LayerNorm (the op, or the nodes it was decomposed into for TensorRT
  8.5: legacy_graph.layernorm_island), Softmax, the router (gate logits, TopK and the gate matrix built
  from it) and the classification head, which stay fp32; the graph's input and outputs keep their types.
- INT8: QDQ from ONNX Runtime's static quantizer in the recipe TensorRT(-RTX) accepts: symmetric
  activations and per-channel symmetric weights, biases unquantized, only the MatMul/Gemm/Conv layers
  that carry weights; the router and the activation-by-activation MatMuls stay in float.
Both stay runnable by ONNX Runtime on CPU, so their accuracy can be measured anywhere.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterable, NamedTuple

import numpy as np

from .quiet import quiet
from ..runtime.runners import load_onnx
from ..artifacts.sidecar import user_fields
from .handoff import Variant

FP32_OPS = {"LayerNormalization", "Softmax"}


class Converted(NamedTuple):
    """A variant written to its file: its sidecar fields, and its graph as written (so nothing parses it again)."""

    info: dict
    proto: Any


def router_nodes(model) -> set[str]:
    """Names of the routing nodes: each TopK, the MatMul/Gemm producing its input, and every node fed only
    by routing nodes or constants (the softmax over the top k, the one-hot gate matrix)."""
    producers = {o: n for n in model.graph.node for o in n.output}
    constants = {t.name for t in model.graph.initializer} | {n.output[0] for n in model.graph.node
                                                            if n.op_type == "Constant"}
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
    weights = {t.name for t in model.graph.initializer} | {n.output[0] for n in model.graph.node
                                                          if n.op_type == "Constant"}
    producers = {o: n for n in model.graph.node for o in n.output}

    def from_weight(name: str) -> bool:
        node = producers.get(name)  # a weight may reach the MatMul through a Transpose or Reshape
        while node is not None and node.op_type in ("Transpose", "Reshape", "Cast") and node.input[0] not in weights:
            node = producers.get(node.input[0])
        return name in weights or (node is not None and node.op_type in ("Transpose", "Reshape", "Cast")
                                   and node.input[0] in weights)

    return {n.name for n in model.graph.node if n.op_type == "MatMul" and not any(from_weight(i) for i in n.input)}


def head_nodes(model) -> set[str]:
    """The node that produces the logits output (the classifier's Gemm/MatMul + bias)."""
    logits = model.graph.output[0].name
    return {n.name for n in model.graph.node if logits in n.output}


def fp32_source(src: Path, source: "Variant | None") -> "Variant":
    """The fp32 artifact a variant is made from: the one the run holds, else read from disk (once)."""
    if source is not None:
        return source
    return Variant.read(src)


def derived_record(source: "Variant", precision: str, extra: dict) -> dict:
    """The variant's sidecar fields: its source's, then `extra`."""
    fields = user_fields(source.record.to_json())
    for measured in ("parity", "accuracy"):  # the fp32 export's figures; the variant gets its own
        fields.pop(measured, None)
    # a variant runs where its source runs (a fused ONNX Runtime graph stays ONNX Runtime's), unless it narrows it
    return {**fields, "precision": precision, "source_onnx": source.path.name, "source_onnx_sha256": source.sha256,
            "runtime": source.record.runtime, **extra}


def set_precision_meta(model, precision: str) -> None:
    for prop in model.metadata_props:
        if prop.key == "mlit_edge":
            meta = json.loads(prop.value)
            meta["precision"] = precision
            prop.value = json.dumps(meta)


def name_nodes(model) -> int:
    """Give every unnamed or duplicate-named node a unique name; returns how many were renamed. ONNX
    names are optional, but the node lists here and onnxconverter-common's cast pass key nodes by name
    (unnamed nodes all collide on "", which its pass turns into an AttributeError)."""
    seen: set[str] = set()
    renamed = 0
    for i, node in enumerate(model.graph.node):
        if not node.name or node.name in seen:
            base = f"{node.op_type}_{i}"
            name = base
            while name in seen:
                name += "_"
            node.name, renamed = name, renamed + 1
        seen.add(node.name)
    return renamed


def fp32_layer_names(model) -> set[str]:
    """The nodes a reduced-precision graph computes in fp32: LayerNorm (the op, or its decomposed island),
    Softmax, the router and the head. fp16 keeps them out of the casts; a weakly typed TensorRT 8.x build pins
    their layers (the sidecar's `fp32_layers`)."""
    from .legacy_graph import layernorm_island

    return (router_nodes(model) | head_nodes(model) | layernorm_island(model)
            | {n.name for n in model.graph.node if n.op_type in FP32_OPS})


def float_inputs(model, nodes: set[str]) -> int:
    """Let the float `nodes` (the router, activation-by-activation matmuls) read the float activations:
    the quantizer may hand them the Q/DQ pair it made for a quantized consumer of the same tensor."""
    producers = {o: n for n in model.graph.node for o in n.output}
    rewired = 0
    for node in model.graph.node:
        if node.name not in nodes:
            continue
        for j, name in enumerate(node.input):
            dq = producers.get(name)
            q = producers.get(dq.input[0]) if dq is not None and dq.op_type == "DequantizeLinear" else None
            if q is not None and q.op_type == "QuantizeLinear":  # an activation (weights have no QuantizeLinear)
                node.input[j] = q.input[0]
                rewired += 1
    return rewired


class _Reader:
    """ONNX Runtime calibration reader over preprocessed float32 NCHW batches."""

    def __init__(self, input_name: str, batches: Iterable[np.ndarray]) -> None:
        self.input_name, self.it = input_name, iter(batches)

    def get_next(self):
        batch = next(self.it, None)
        return None if batch is None else {self.input_name: batch}


def to_int8(src: str | Path, out: str | Path, calib: np.ndarray, calib_info: dict, batch: int = 32,
            source: "Variant | None" = None) -> Converted:
    """Write to `out` the INT8 QDQ ONNX of `src` calibrated on `calib` (N, 3, S, S) float32; returns its
    sidecar fields and its graph. Only TensorRT's flavour is made this way (`flavours.FLAVOURS`)."""
    import onnx
    from onnxruntime.quantization import CalibrationMethod, QuantFormat, QuantType, quantize_static

    src, out = Path(src), Path(out)
    if calib.ndim != 4 or len(calib) == 0:
        raise ValueError("calibration data must be a non-empty (N, 3, H, W) float32 array")
    source = fp32_source(src, source)
    model = source.graph()
    exclude = sorted(router_nodes(model) | activation_matmuls(model))
    # what a weakly typed TensorRT 8.x build pins to fp32: not the layers Q/DQ makes INT8 (the head's Gemm),
    # whose explicit precision a pin would contradict
    ops = {n.name: n.op_type for n in model.graph.node}
    fp32_layers = sorted(n for n in fp32_layer_names(model) if n in exclude or ops[n] not in ("MatMul", "Gemm", "Conv"))
    input_name = model.graph.input[0].name
    fixed = model.graph.input[0].type.tensor_type.shape.dim[0]
    step = fixed.dim_value if fixed.HasField("dim_value") else batch
    batches = [calib[i:i + step] for i in range(0, len(calib) - step + 1, step)] or [calib[:step]]
    with quiet():
        quantize_static(model, str(out), _Reader(input_name, batches), quant_format=QuantFormat.QDQ,
                        op_types_to_quantize=["MatMul", "Gemm", "Conv"], per_channel=True,
                        activation_type=QuantType.QInt8, weight_type=QuantType.QInt8,
                        calibrate_method=CalibrationMethod.MinMax, nodes_to_exclude=exclude,
                        extra_options={"ActivationSymmetric": True, "WeightSymmetric": True,
                                       "QuantizeBias": False, "DedicatedQDQPair": True})
    quantized = load_onnx(out)
    float_inputs(quantized, set(exclude))
    set_precision_meta(quantized, "int8")
    onnx.save(quantized, str(out))
    return Converted(derived_record(source, "int8", {"runtime": "tensorrt", "fp32_layers": fp32_layers,
                                                      "calibration": {**calib_info, "images": int(len(calib)),
                                                                      "method": "MinMax, symmetric, per-channel weights",
                                                                      "float_nodes": len(exclude)}}), quantized)


def to_int8_dynamic(src: str | Path, out: str | Path, coverage: dict | None = None,
                    source: "Variant | None" = None) -> Converted:
    """Write to `out` the INT8 ONNX of `src` that ONNX Runtime's CPU kernels run fastest (measured against
    static QDQ and QOperator graphs: docs/export-and-build.md): int8 per-channel weights, each call's activations
    quantized from their own range (DynamicQuantizeMatMul on VNNI/AVX2), the router and the
    activation-by-activation matmuls in float. Returns its sidecar fields and graph. ONNX Runtime only."""
    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic

    src, out = Path(src), Path(out)
    source = fp32_source(src, source)
    model = source.graph()
    exclude = sorted(router_nodes(model) | activation_matmuls(model))
    with quiet():
        quantize_dynamic(model, str(out), op_types_to_quantize=["MatMul", "Gemm"], per_channel=True,
                         weight_type=QuantType.QInt8, nodes_to_exclude=exclude)
    quantized = load_onnx(out)
    set_precision_meta(quantized, "int8")
    onnx.save(quantized, str(out))
    quantization = {"mode": "dynamic", "weights": "int8, symmetric, per output channel",
                    "activations": "uint8 from each call's own range (no calibration set)", "float_nodes": len(exclude)}
    if coverage is not None:
        quantization["coverage"] = {k: coverage[k] for k in ("tokens", "min_tokens", "warnings")}
    return Converted(derived_record(source, "int8", {"runtime": "onnxruntime", "quantization": quantization}),
                     quantized)
