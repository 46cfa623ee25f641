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

UINT8_INPUT_SINCE = (8, 5)  # the first TensorRT with UINT8 network input (module docstring)
ONNX_UINT8, ONNX_FLOAT, ONNX_FLOAT16 = 2, 1, 10  # onnx.TensorProto's element types (stdlib only: no onnx import to name them)
CAST_TO = {ONNX_FLOAT: "FLOAT", ONNX_FLOAT16: "FLOAT16"}  # the only casts TensorRT's kUINT8 documentation allows


def uint8_input_allowed(trt_version: str) -> bool:
    """Whether that TensorRT ("8.5.2", "10.3", or a bare major such as the desktop profile's "10") takes UINT8
    network input; ValueError for what is not a version."""
    from .profiles import trt_major_minor

    version = str(trt_version)
    if version.isdigit():  # a whole major: every release of it, so its first
        return (int(version), 0) >= UINT8_INPUT_SINCE
    return trt_major_minor(version) >= UINT8_INPUT_SINCE


def uint8_inputs(model: Any) -> List[str]:
    """The names of `model`'s UINT8 graph inputs (initializers are not inputs)."""
    weights = {t.name for t in model.graph.initializer}
    return [i.name for i in model.graph.input if i.name not in weights and i.type.tensor_type.elem_type == ONNX_UINT8]


def uint8_problems(model: Any) -> List[str]:
    """What in `model` breaks TensorRT's UINT8 rule: a UINT8 input read by anything but a Cast to float or half,
    and a UINT8 tensor that is neither a graph input nor a graph output. Empty for a graph without UINT8."""
    problems = []
    inputs, outputs = set(uint8_inputs(model)), {o.name for o in model.graph.output}
    for node in model.graph.node:
        to = next((a.i for a in node.attribute if a.name == "to"), None) if node.op_type == "Cast" else None
        for x in sorted(set(node.input) & inputs):
            if to not in CAST_TO:
                what = f"Cast to element type {to}" if node.op_type == "Cast" else node.op_type
                problems.append(f"UINT8 input {x!r} is read by {what} ({node.name or 'unnamed'}): TensorRT converts "
                                "a UINT8 input only by a Cast to FLOAT or FLOAT16, before any other layer")
        if to == ONNX_UINT8 and node.output[0] not in outputs:
            problems.append(f"Cast {node.name or 'unnamed'} makes the intermediate UINT8 tensor {node.output[0]!r}: "
                            "TensorRT takes UINT8 only as a network input or output")
    return problems
