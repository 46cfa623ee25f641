"""UINT8 network input on TensorRT: which versions take it, and in which graph. From NVIDIA's own sources:

* The version, `UINT8_INPUT_SINCE`: TensorRT's Python API defines `DataType.UINT8` from release/8.5 on
  (python/src/infer/pyFoundationalTypes.cpp; release/8.4's enum ends at BOOL), and its ONNX parser imports
  UINT8 network I/O from the same release: onnx-tensorrt docs/Changelog.md, "TensorRT 8.5 GA Release": "Added
  support for importing ONNX networks with `UINT8` I/O types". (8.5-GA's docs/operators.md still lists Cast's
  types without UINT8, but its Cast importer, builtin_op_importers.cpp, takes a UINT8 input and asserts the
  cast is to FLOAT or HALF: the table is stale.) Every JetPack here (5.1: 8.5 and later) has it; the
  generated API data (engine/data/trt_python_api.json) is checked against the constant by the tests.
* The graph, `uint8_problems`: the documentation of `DataType::kUINT8`, the same on release/8.5
  (include/NvInferRuntimeCommon.h), release/8.6 and release/10.x (include/NvInferRuntimeBase.h): convert
  kUINT8 network-level inputs to {kFLOAT, kHALF} before any other layer uses them; "kUINT8 conversions are only
  supported for {kFLOAT, kHALF}" and "not supported for {kINT8, kINT32, kBOOL}". onnx-tensorrt 8.6-GA and 10.x
  ModelImporter.cpp refuse a node whose UINT8 output is not a graph output ("TensorRT does not support UINT8
  types for intermediate tensors!").

TensorRT-RTX 1.7, the CI's builder, is laxer: it builds a UINT8 -> INT32 Cast that JetPack's TensorRT refuses.
So the graph rule is checked here (`mlit-edge check`), on every graph, and not left to the CI's build.
Stdlib only and Python 3.8 syntax: the device's `check` imports it.
"""
from __future__ import annotations

from typing import Any, List

from .profiles import trt_major_minor

UINT8_INPUT_SINCE = (8, 5)  # the first TensorRT with UINT8 network input (module docstring)
ONNX_UINT8, ONNX_FLOAT, ONNX_FLOAT16 = 2, 1, 10  # onnx.TensorProto's element types (stdlib only: no onnx import to name them)
CAST_TO = {ONNX_FLOAT: "FLOAT", ONNX_FLOAT16: "FLOAT16"}  # the only casts TensorRT's kUINT8 documentation allows


def uint8_input_allowed(trt_version: str) -> bool:
    """Whether that TensorRT ("8.5.2", "10.3", or a bare major such as the desktop profile's "10") takes UINT8
    network input; ValueError for what is not a version."""
    version = str(trt_version)
    if version.isdigit():  # a whole major: every release of it, so its first
        return (int(version), 0) >= UINT8_INPUT_SINCE
    return trt_major_minor(version) >= UINT8_INPUT_SINCE


def uint8_inputs(model: Any) -> List[str]:
    """The names of `model`'s UINT8 graph inputs (initializers are not inputs)."""
    weights = {t.name for t in model.graph.initializer}
    return [i.name for i in model.graph.input if i.name not in weights and i.type.tensor_type.elem_type == ONNX_UINT8]


def _uint8_made(model: Any) -> List[Any]:
    """(node, output) of each node output whose element type is UINT8 by the node's own definition: a Cast to
    UINT8, and a QuantizeLinear whose zero point is UINT8 or whose `output_dtype` (opset 21) says UINT8 (onnx
    docs/Operators.md, QuantizeLinear: "the output type is determined by the zero point")."""
    elem = {t.name: t.data_type for t in model.graph.initializer}
    elem.update((i.name, i.type.tensor_type.elem_type) for i in model.graph.input)
    for node in model.graph.node:
        value = next((a.t for a in node.attribute if a.name == "value"), None) if node.op_type == "Constant" else None
        if value is not None and len(node.output) == 1:
            elem[node.output[0]] = value.data_type
    made = []
    for node in model.graph.node:
        if not node.output or not node.output[0]:
            continue
        attrs = {a.name: a.i for a in node.attribute if a.name in ("to", "output_dtype")}
        if node.op_type == "Cast" and attrs.get("to") == ONNX_UINT8:
            made.append((node, node.output[0]))
        elif node.op_type == "QuantizeLinear" and node.domain in ("", "ai.onnx"):
            zero_point = node.input[2] if len(node.input) > 2 else ""
            if attrs.get("output_dtype") == ONNX_UINT8 or (zero_point and elem.get(zero_point) == ONNX_UINT8):
                made.append((node, node.output[0]))
    return made


def uint8_problems(model: Any) -> List[str]:
    """What in `model` breaks TensorRT's UINT8 rule: a UINT8 input read by anything but a Cast to float or half,
    and a UINT8 tensor that is neither a graph input nor a graph output (a Cast to UINT8, a QuantizeLinear with
    a UINT8 zero point: onnx-tensorrt's "TensorRT does not support UINT8 types for intermediate tensors!").
    Empty for a graph without UINT8. The one place this rule lives: `mlit-edge check` reports it."""
    problems = []
    inputs, outputs = set(uint8_inputs(model)), {o.name for o in model.graph.output}
    for node in model.graph.node:
        to = next((a.i for a in node.attribute if a.name == "to"), None) if node.op_type == "Cast" else None
        for x in sorted(set(node.input) & inputs):
            if to not in CAST_TO:
                what = f"Cast to element type {to}" if node.op_type == "Cast" else node.op_type
                problems.append(f"UINT8 input {x!r} is read by {what} ({node.name or 'unnamed'}): TensorRT converts "
                                "a UINT8 input only by a Cast to FLOAT or FLOAT16, before any other layer")
    for node, tensor in _uint8_made(model):
        if tensor not in outputs:
            problems.append(f"{node.op_type} {node.name or 'unnamed'} makes the intermediate UINT8 tensor {tensor!r}: "
                            "TensorRT takes UINT8 only as a network input or output")
    return problems
