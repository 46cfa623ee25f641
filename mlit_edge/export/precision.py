"""Precision lives in the ONNX: fp16 and INT8-QDQ variants of an fp32 export.

- fp16 (`fp16.to_fp16`): everything converted except LayerNorm (the op, or the nodes it was decomposed into for TensorRT
  8.5: legacy_graph.layernorm_island), Softmax, the router (gate logits, TopK and the gate matrix built
  from it) and the classification head, which stay fp32; the graph's input and outputs keep their types.
- INT8 for TensorRT (`to_int8`): QDQ from ONNX Runtime's static quantizer in the recipe TensorRT(-RTX) accepts:
  symmetric activations and per-channel symmetric weights, biases unquantized, only the MatMul/Gemm/Conv layers
  that carry weights; the router and the activation-by-activation MatMuls stay in float.
- INT8 for ONNX Runtime (`to_int8_ort`): the same quantizer and calibration, in the form ONNX Runtime's CPU fuses
  into integer kernels (uint8 activations, int32 biases, MatMul/Gemm only); every scale fixed, so no logit
  depends on the batch.
All stay runnable by ONNX Runtime on CPU, so their accuracy can be measured anywhere.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, NamedTuple

import numpy as np

from . import ranges, smoothing, weight_rounding
from .integer_gemm import integer_kernels
from .quiet import quiet
from ..base.progress import Step, progress
from ..runtime.runners import OnnxRuntimeRunner, load_onnx
from ..artifacts.sidecar import user_fields
from .handoff import Variant
# the router and activation matmuls are read here by name (tests, engine)
from .int8_recipe import (MATMULS, ONNXRUNTIME, PATCH, TENSORRT, Int8Recipe, activation_matmuls,  # noqa: F401
                          float_nodes, router_nodes)

FP32_OPS = {"LayerNormalization", "Softmax"}


class Converted(NamedTuple):
    """A variant written to its file: its sidecar fields, and its graph as written (so nothing parses it again)."""

    info: dict
    proto: Any


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


# ONNX Runtime's calibrators run one batch at a time (`_Reader.set_range`), each batch's activations histogrammed
# (Percentile) or reduced to a range (MinMax) before the next is read: fed all at once they keep every calibrated
# tensor of every image in memory first (10.4 GB for 512 images of mLiT-XXS, 3x slower). MinMax merges exactly.
# A recipe's Percentile ranges are export/ranges.py's, given over MinMax: ONNX Runtime's own histograms sort each
# batch after the first.
STRIDED = {"CalibStridedMinMax": 1}


class _Reader:
    """ONNX Runtime calibration reader over preprocessed float32 NCHW batches, in strides of them (`STRIDED`);
    `step` counts the images read."""

    def __init__(self, input_name: str, batches: Iterable[np.ndarray], step: Step) -> None:
        self.input_name, self.batches, self.step = input_name, list(batches), step
        self.set_range(0, len(self.batches))

    def __len__(self) -> int:
        return len(self.batches)

    def set_range(self, start_index: int, end_index: int) -> None:
        self.it = iter(self.batches[start_index:end_index])

    def get_next(self):
        batch = next(self.it, None)
        if batch is None:
            return None
        self.step.advance(len(batch))
        return {self.input_name: batch}


def _check_calibration(calib: np.ndarray) -> None:
    """Both INT8 makers take the calibration images as the graph does: refused in one line otherwise."""
    if getattr(calib, "ndim", 0) != 4 or len(calib) == 0:
        raise ValueError("calibration data must be a non-empty (N, 3, H, W) float32 array")


def _fixed_batch(model) -> int | None:
    """The batch a graph's input is fixed to; None where it takes any."""
    dim = model.graph.input[0].type.tensor_type.shape.dim[0]
    return dim.dim_value if dim.HasField("dim_value") else None


def _batches(model, calib: np.ndarray, batch: int) -> list[np.ndarray]:
    """The calibration images in whole batches the graph takes: its fixed batch, else `batch`."""
    step = _fixed_batch(model) or batch
    return [calib[i:i + step] for i in range(0, len(calib) - step + 1, step)] or [calib[:step]]


def _quantize(model, out: Path, recipe: Int8Recipe, exclude: list[str], batches: list[np.ndarray],
              op_types: tuple, activations: str, options: dict,
              rewrite: Callable[[Any], Any] | None = None) -> tuple[Any, dict | None]:
    """ONNX Runtime's static QDQ quantizer on `model` (both INT8 makers): `op_types` but `exclude` quantized on
    their inputs only, per-channel symmetric int8 weights, `activations` (a QuantType name), `recipe`'s ranges
    and weight rounding, the float nodes reading float inputs, then `rewrite` (in place) where given; written to
    `out`. Returns the graph and the rounding's record (None: nearest rounding)."""
    import onnx
    from onnxruntime.quantization import CalibrationMethod, QuantFormat, QuantType, quantize_static

    weights = weight_rounding.float_weights(model) if recipe.rounding == "gptq" else {}
    method, ranged = ranges.calibration(model, recipe.method, op_types, set(exclude), batches)
    read = batches[:1] if ranged else batches  # every range it would find is overridden: one batch to run on
    with quiet(), progress("calibration pass", sum(map(len, read))) as shown:
        quantize_static(model, str(out), _Reader(model.graph.input[0].name, read, shown),
                        quant_format=QuantFormat.QDQ, op_types_to_quantize=list(op_types), per_channel=True,
                        activation_type=QuantType[activations], weight_type=QuantType.QInt8,
                        calibrate_method=CalibrationMethod[method], nodes_to_exclude=exclude,
                        extra_options={"WeightSymmetric": True, "OpTypesToExcludeOutputQuantization": list(op_types),
                                       **STRIDED, **ranged, **options})
    quantized = load_onnx(out)
    rounded = weight_rounding.apply(quantized, weights, batches) if weights else None
    float_inputs(quantized, set(exclude))
    if rewrite is not None:
        rewrite(quantized)
    set_precision_meta(quantized, "int8")
    onnx.save(quantized, str(out))
    return quantized, rounded


def to_int8(src: str | Path, out: str | Path, calib: np.ndarray, calib_info: dict, batch: int = 32,
            source: "Variant | None" = None, recipe: Int8Recipe = TENSORRT) -> Converted:
    """Write to `out` the INT8 QDQ ONNX of `src` calibrated on `calib` (N, 3, S, S) float32; returns its
    sidecar fields and its graph. Only TensorRT's flavour is made this way (`flavours.FLAVOURS`). `recipe`:
    the layers kept in float, the calibration method, smoothing and weight rounding (`int8_recipe`).

    Q/DQ goes on the inputs of the weighted matmuls only, never on their outputs: NVIDIA's placement
    recommendation ("Quantize all inputs of weighted-operations ... By default, do not quantize the outputs of
    weighted-operations", TensorRT Developer Guide, "Q/DQ Layer-Placement Recommendations",
    docs.nvidia.com/deeplearning/tensorrt/developer-guide; "Working with Quantized Types" in the 10.x guide). A
    quantized output adds one more per-tensor rounding of every projection before the residual add and the
    router: with it (ONNX Runtime's default) the worst layer's expert agreement was 0.916, without it 0.971
    (docs/measurements.md, "INT8 sensitivity")."""
    src, out = Path(src), Path(out)
    _check_calibration(calib)
    source = fp32_source(src, source)
    model, smoothed = smoothing.apply(source.graph(), recipe, calib)  # exact; the same graph when not asked
    exclude = sorted(float_nodes(model, recipe))
    # what a weakly typed TensorRT 8.x build pins to fp32: not the layers Q/DQ makes INT8 (the head's Gemm),
    # whose explicit precision a pin would contradict
    ops = {n.name: n.op_type for n in model.graph.node}
    fp32_layers = sorted(n for n in fp32_layer_names(model) if n in exclude or ops[n] not in ("MatMul", "Gemm", "Conv"))
    quantized, rounded = _quantize(model, out, recipe, exclude, _batches(model, calib, batch), MATMULS, "QInt8",
                                   {"ActivationSymmetric": True, "QuantizeBias": False, "DedicatedQDQPair": True})
    calibration = {**calib_info, "images": int(len(calib)), "method": f"{recipe.method}, symmetric, per-channel weights",
                   "float_nodes": len(exclude), **recipe.record(model, set(exclude)),
                   **({"smoothing": smoothed} if smoothed else {}), **({"rounded": rounded} if rounded else {})}
    return Converted(derived_record(source, "int8", {"runtime": "tensorrt", "fp32_layers": fp32_layers,
                                                      "calibration": calibration}), quantized)


def split_residual_gemms(model, skip: set[str]) -> int:
    """Rewrite each Gemm not in `skip` whose C is an activation (the attention's output projection adding the
    residual) as a MatMul of the same name and an Add, in place; returns how many. A static QGemm takes only a
    constant C, and a Gemm left with dequantized weights runs ONNX Runtime's float kernel, whose one-row path
    rounds differently from its many-row one: an image's logits would then depend on its batch. The MatMul is
    written as MatMulIntegerToFloat once quantized (`integer_gemm`), so ONNX Runtime cannot fuse it and the Add
    back into that Gemm."""
    from onnx import helper

    constants = {t.name for t in model.graph.initializer}
    nodes, split = [], 0
    for node in model.graph.node:
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        plain = attrs.get("alpha", 1.0) == 1.0 and attrs.get("beta", 1.0) == 1.0 and not attrs.get("transA", 0)
        if (node.op_type != "Gemm" or node.name in skip or len(node.input) < 3 or node.input[2] in constants
                or not plain or attrs.get("transB", 0) or node.input[1] not in constants):
            nodes.append(node)
            continue
        product = f"{node.output[0]}_matmul"
        nodes += [helper.make_node("MatMul", node.input[:2], [product], name=node.name),
                  helper.make_node("Add", [product, node.input[2]], [node.output[0]], name=f"{node.name}_residual")]
        split += 1
    del model.graph.node[:]
    model.graph.node.extend(nodes)
    return split


def batch_drift(path: Path, images: np.ndarray, session: Mapping, batch: int = 16) -> dict:
    """How far any logit of `images[:batch]` moves between running them one at a time and as one batch (ONNX
    Runtime, with the artifact's `session` options): 0 where no image's answer depends on its batch-mates."""
    x = images[:batch]
    with OnnxRuntimeRunner(path, session=session) as run:
        whole = run.infer({run.input_name: x})["logits"]
        alone = np.concatenate([run.infer({run.input_name: x[i:i + 1]})["logits"] for i in range(len(x))])
    return {"images": len(x), "batches": [1, len(x)], "max_abs_logit": float(np.abs(whole - alone).max())}


def to_int8_ort(src: str | Path, out: str | Path, calib: np.ndarray, calib_info: dict, batch: int = 32,
                source: "Variant | None" = None, recipe: Int8Recipe = ONNXRUNTIME) -> Converted:
    """Write to `out` the static INT8 ONNX of `src` for ONNX Runtime's CPU kernels, calibrated on `calib`
    (N, 3, S, S) float32; returns its sidecar fields and graph. ONNX Runtime only.

    Every scale is fixed by calibration, so an image's logits do not depend on its batch-mates (the dynamic
    graph before issue 49 quantized each call's activations from the whole batch's range). The form is the one
    ONNX Runtime runs on integer kernels, measured the fastest static form (docs/export-and-build.md): uint8
    asymmetric activations, int8 symmetric per-channel weights, each MatMul and Gemm written as ONNX Runtime's
    MatMulIntegerToFloat (`integer_gemm`: its own fusion makes the biased ones QGemm, measured slower, and the
    residual ones Gemms on dequantized weights). No weighted matmul is left to a float kernel reading dequantized
    weights, whose rounding changes with the batch. The patch embedding's Conv stays float: its only static
    kernel (QLinearConv) requantizes its output, which measured slower. `recipe`: what else stays float
    (`int8_recipe`)."""
    src, out = Path(src), Path(out)
    _check_calibration(calib)
    source = fp32_source(src, source)
    model, smoothed = smoothing.apply(source.graph(), recipe, calib)  # exact; the same graph when not asked
    exclude = sorted(float_nodes(model, recipe))  # named before the split, which keeps each Gemm's name
    split_residual_gemms(model, set(exclude))
    quantized, rounded = _quantize(model, out, recipe, exclude, _batches(model, calib, batch), ("MatMul", "Gemm"),
                                   "QUInt8", {"ActivationSymmetric": False, "QuantizeBias": True}, integer_kernels)
    # a graph of one fixed batch has no other batch to differ from
    drift = None if _fixed_batch(model) else batch_drift(out, calib, source.record.ort_session)
    floats = set(exclude) | {n.name for n in model.graph.node if n.op_type == "Conv"}
    kept = recipe.record(model, floats)
    kept["float"] = list(dict.fromkeys([*kept["float"], PATCH]))  # the form quantizes MatMul and Gemm alone
    quantization = {"mode": "static", "format": "Q/DQ MatMuls and MatMulIntegerToFloat (com.microsoft)",
                    "weights": "int8, symmetric, per output channel", "biases": "int32 values, added in float",
                    "activations": f"uint8, asymmetric, scales fixed by calibration ({recipe.method})",
                    "float_nodes": len(floats), "batch_drift": drift, **kept,
                    **({"smoothing": smoothed} if smoothed else {}), **({"rounded": rounded} if rounded else {})}
    calibration = {**calib_info, "images": int(len(calib)),
                   "method": f"{recipe.method}, asymmetric uint8 activations, per-channel weights"}
    return Converted(derived_record(source, "int8", {"runtime": "onnxruntime", "quantization": quantization,
                                                      "calibration": calibration}), quantized)
