"""A sidecar against the graph it sits beside, for the commands that read a graph without running it
(`export-deepstream`, `export-triton`), with the check `predict` runs on the model it opened.

The sidecar's sha256 proves only that it was written for these bytes: a sidecar re-signed over bytes that are no
graph, a graph of another model, or a one-node graph, would otherwise be published as a DeepStream or Triton model
that contradicts its own config (3 labels for 10 logits, a 72x72 `preprocess.size` for a 36x36 input, INT8 mode
for a graph without Q/DQ). `GraphIO` holds the I/O fields of the Runner contract (`runners.Runner`) read from the
graph's bytes or a plan's recorded `engine.io`, and `model_io.check_against_model` (predict's check, which reads
those fields alone) refuses the same contradictions here in the same words.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

from ..devices.plan_consumer import PlanTensor, engine_io
from ..artifacts.model_io import check_against_model
from ..artifacts.schema import ArtifactRecord
from ..artifacts.sidecar import SidecarError
from ..artifacts.targets import parser_reads
from ..artifacts.graph_outputs import LOGITS
from ..artifacts.input_convention import onnx_dtype_name
from ..runtime.runners import load_onnx

TRT_DTYPES = {"float": "float32", "half": "float16", "int8": "int8", "int32": "int32", "int64": "int64",
              "uint8": "uint8", "bool": "bool", "bfloat16": "bfloat16"}  # engine.io's TensorRT names, as numpy's


@dataclass(frozen=True)
class GraphIO:
    """The Runner contract's I/O fields, without a runtime: first input's shape and dtype (numpy's name), every
    output's shape (None where free), and whether the graph is Q/DQ INT8 (None: unknown, a plan)."""

    input_names: List[str]
    input_shape: Tuple[Optional[int], ...]
    input_dtype: Optional[str]
    output_names: List[str] = field(default_factory=list)
    output_shapes: Dict[str, Tuple[Optional[int], ...]] = field(default_factory=dict)
    quantized: Optional[bool] = None

    @property
    def input_name(self) -> str:
        return self.input_names[0]


def parse_onnx(content: bytes, path: str | Path) -> Any:
    """The ModelProto of `content` (its external data not loaded: `runners.load_onnx` of the bytes); ValueError in
    one line, naming the artifact, for bytes that are no ONNX model."""
    try:
        return load_onnx(content)
    except ValueError:  # the loader's line names "the ONNX bytes": say which file, and what to do
        raise ValueError(f"{Path(path).name} is not a readable ONNX model, though its sidecar's sha256 matches it; "
                         "export it again") from None


def onnx_graph_io(model: Any) -> GraphIO:
    """`GraphIO` of a parsed ONNX model (weights left out of its inputs)."""
    graph = model.graph
    weights = {t.name for t in graph.initializer}
    inputs = [v for v in graph.input if v.name not in weights]

    def dims(v: Any) -> Tuple[Optional[int], ...]:
        return tuple(d.dim_value if d.HasField("dim_value") else None for d in v.type.tensor_type.shape.dim)

    return GraphIO([v.name for v in inputs], dims(inputs[0]) if inputs else (),
                   onnx_dtype_name(inputs[0].type.tensor_type.elem_type) if inputs else None,
                   [o.name for o in graph.output], {o.name: dims(o) for o in graph.output},
                   any(n.op_type == "QuantizeLinear" for n in graph.node))


def plan_graph_io(record: ArtifactRecord, path: str | Path) -> GraphIO:
    """`GraphIO` of a plan from its sidecar's checked `engine.io` (-1 dims as free)."""
    inputs, outputs = engine_io(record, path)

    def dims(t: PlanTensor) -> Tuple[Optional[int], ...]:
        return tuple(None if d == -1 else d for d in t.shape)

    return GraphIO([t.name for t in inputs], dims(inputs[0]), TRT_DTYPES.get(inputs[0].dtype, inputs[0].dtype),
                   [t.name for t in outputs], {t.name: dims(t) for t in outputs})


def check_sidecar(record: ArtifactRecord, io: GraphIO, path: str | Path, scores: Optional[str] = LOGITS) -> None:
    """Refuse, in one line, a sidecar that contradicts the graph: no input, or predict's refusals
    (`model_io.check_against_model`: input convention and dtype, (N, 3, S, S) against preprocess.size, a class name
    per logit), or precision int8 on a graph without Q/DQ, or the reverse (nvinfer and ONNX Runtime's TensorRT
    accelerator would set TensorRT's INT8 mode on a float graph with no scales, or leave it off a Q/DQ one). An
    ONNX Runtime graph (runtime "onnxruntime": integer matmuls, no QuantizeLinear) keeps its own INT8 form.
    `scores`: the output of class scores, checked as predict checks logits (a probabilities plan's, or a Triton
    model's first output where it has no logits)."""
    where = f"{Path(path).name}"
    if not io.input_names:
        raise SidecarError(f"{where}: the graph has no input, expected (N, 3, H, W) images: not an mlit-edge "
                           "classifier; export it again")
    if scores is not None and scores != LOGITS and scores in io.output_shapes:
        io = replace(io, output_shapes={LOGITS: io.output_shapes[scores]})
    check_against_model(record, io, path)  # GraphIO is a ModelIO
    int8 = record.precision == "int8"
    if io.quantized is None or not parser_reads(record.runtime) or int8 == io.quantized:
        return
    said = "int8" if int8 else repr(record.precision)
    graph = "holds no QuantizeLinear (not Q/DQ INT8)" if int8 else "is Q/DQ INT8 (QuantizeLinear)"
    raise SidecarError(f"{where}.json: precision is {said}, but the graph {graph}; the sidecar does not belong to "
                       "this graph: rebuild the artifact with mlit-edge build")


__all__ = ["GraphIO", "parse_onnx", "onnx_graph_io", "plan_graph_io", "check_sidecar"]
