"""The graph DeepStream runs: the artifact's graph ending in probabilities, float32, and nothing else.

`with_probabilities` appends an exact Softmax over the class axis of the `logits` output and makes its result
the graph's one output, `probabilities`, in float32:
- nvinfer's default classifier parser takes every output layer as one attribute and reads it as a float array
  of probabilities, keeping the class whose value is above `classifier-threshold` and above a running maximum
  that starts at 0 (DeepStream 6.2, sources/libs/nvdsinfer/nvdsinfer_context_impl_output_parsing.cpp,
  ClassifyPostprocessor::parseAttributesFromSoftmaxLayers: `numAttributes = m_OutputLayerInfo.size()`,
  `float *outputCoverageBuffer`, `float maxProbability = 0`). Logits would lose every image whose top logit is
  <= 0 and report a logit as the confidence; a second output (a --probe graph's expert indices) would be read
  as a second attribute. So the copy has one output, probabilities.
- float16 logits (the fp16 graph's) are cast to float32 before the Softmax rather than after: the Softmax then
  runs on exactly the logits the graph computed, in float32, where a float16 Softmax would round every
  probability to 11 bits; and the output is the float32 that parser reads.
The graph's other nodes are kept as they are (an INT8 graph's Q/DQ included: its logits come out of a
DequantizeLinear in float32); nodes and weights that fed only the dropped outputs are removed.
"""
from __future__ import annotations

from typing import Any, Iterable, Set, Tuple

from .input_convention import onnx_dtype_name

LOGITS, PROBABILITIES = "logits", "probabilities"
CLASS_AXIS = 1  # logits are (N, classes)
_CAST, _SOFTMAX = "mlit_edge_logits_to_float32", "mlit_edge_probabilities"


def with_probabilities(onnx_bytes: bytes, logits: str = LOGITS) -> bytes:
    """The serialized graph `onnx_bytes` whose only output is `probabilities` = Softmax(`logits`, axis 1) in
    float32; ValueError (one line) for a graph without that output, of another rank or type, or whose weights
    are kept in external files (the DeepStream copy is one file)."""
    import onnx
    from onnx import TensorProto, helper

    try:
        model = onnx.load_from_string(onnx_bytes)
    except Exception as e:  # protobuf's DecodeError and friends: bytes that are no ONNX model
        raise ValueError(f"not a readable ONNX model ({type(e).__name__})") from None
    graph = model.graph
    external = [t.name for t in graph.initializer if t.data_location == TensorProto.EXTERNAL]
    if external:
        raise ValueError(f"the graph keeps weights in external files ({external[0]!r}): save it as one file "
                         "(onnx.save_model without save_as_external_data) for the DeepStream copy")
    out = next((o for o in graph.output if o.name == logits), None)
    if out is None:
        raise ValueError(f"the graph has no output {logits!r} (it has {[o.name for o in graph.output]})")
    ttype = out.type.tensor_type
    if len(ttype.shape.dim) != 2:
        raise ValueError(f"output {logits!r} has rank {len(ttype.shape.dim)}, expected (batch, classes)")
    if ttype.elem_type not in (TensorProto.FLOAT, TensorProto.FLOAT16):
        raise ValueError(f"output {logits!r} is {TensorProto.DataType.Name(ttype.elem_type)}, expected FLOAT or "
                         "FLOAT16")
    names = _tensor_names(graph)
    for taken in (PROBABILITIES, _CAST):
        if taken in names:
            raise ValueError(f"the graph already has a tensor named {taken!r}")
    source = logits
    if ttype.elem_type == TensorProto.FLOAT16:
        graph.node.append(helper.make_node("Cast", [logits], [_CAST], name=_CAST, to=TensorProto.FLOAT))
        source = _CAST
    graph.node.append(helper.make_node("Softmax", [source], [PROBABILITIES], name=_SOFTMAX, axis=CLASS_AXIS))
    result = helper.make_tensor_value_info(PROBABILITIES, TensorProto.FLOAT, None)
    result.type.tensor_type.shape.CopyFrom(ttype.shape)  # (batch, classes), the batch symbolic or fixed as it was
    del graph.output[:]
    graph.output.append(result)
    _prune(graph)
    try:
        onnx.checker.check_model(model)
    except onnx.checker.ValidationError as e:
        raise ValueError(f"the graph with its probabilities output fails ONNX's checker: {str(e).splitlines()[0]}") \
            from None
    return model.SerializeToString()


def _tensor_names(graph: Any) -> Set[str]:
    names = {t.name for t in graph.initializer} | {i.name for i in graph.input}
    for node in graph.node:
        names.update(node.output)
    return names


def _subgraph_inputs(node: Any) -> Iterable[str]:
    """Every name a node's subgraphs (If, Loop, Scan bodies, nested) read: any may come from the outer graph."""
    for attr in node.attribute:
        for sub in ([attr.g] if attr.HasField("g") else []) + list(attr.graphs):
            for inner in sub.node:
                yield from inner.input
                yield from _subgraph_inputs(inner)


def _prune(graph: Any) -> None:
    """Drop the nodes, weights and shape annotations that no longer lead to an output (a probe graph's
    expert-index branches): the copy computes what DeepStream reads and nothing else."""
    needed = {o.name for o in graph.output}
    kept = []
    for node in reversed(graph.node):  # the graph is topologically sorted, so one backward pass suffices
        if any(name in needed for name in node.output):
            kept.append(node)
            needed.update(name for name in node.input if name)
            needed.update(_subgraph_inputs(node))
    kept.reverse()
    del graph.node[:]
    graph.node.extend(kept)
    weights = [t for t in graph.initializer if t.name in needed]
    del graph.initializer[:]
    graph.initializer.extend(weights)
    infos = [v for v in graph.value_info if v.name in needed]
    del graph.value_info[:]
    graph.value_info.extend(infos)


def io_facts(onnx_bytes: bytes) -> Tuple[list, list, bool]:
    """(inputs, outputs, quantized) of a graph: each tensor as (name, element type as numpy names it, dims with
    None where symbolic), weights left out; `quantized` when it holds QuantizeLinear (Q/DQ INT8)."""
    import onnx

    graph = onnx.load_from_string(onnx_bytes).graph
    weights = {t.name for t in graph.initializer}

    def facts(values: Iterable[Any]) -> list:
        return [(v.name, onnx_dtype_name(v.type.tensor_type.elem_type),
                 [d.dim_value if d.HasField("dim_value") else None for d in v.type.tensor_type.shape.dim])
                for v in values if v.name not in weights]

    return facts(graph.input), facts(graph.output), any(n.op_type == "QuantizeLinear" for n in graph.node)


__all__ = ["LOGITS", "PROBABILITIES", "with_probabilities", "io_facts"]
