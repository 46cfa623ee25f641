"""What an ONNX file's graph holds, read from its bytes before ONNX Runtime is handed them.

`onnxruntime_ops` names the ops only ONNX Runtime runs, so that TensorRT's build and check refuse them.
The runtime refuses two kinds of graph that mlit-edge never exports and that ONNX Runtime would run
without complaint: control flow (`Loop`, `If`, `Scan`, or any node carrying a subgraph), whose run
time a file can make unbounded (a Loop of 10^12 steps hangs a call), and a `logits` output that is
already probabilities (a Softmax on it), which the runtime's own softmax would flatten into wrong
confidences. The scan reads protobuf's wire format directly, because a device with ONNX Runtime need
not have the `onnx` package, and it skips the weights by their lengths, so it costs milliseconds.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Iterator

CONTROL_FLOW = ("Loop", "If", "Scan")
PROBABILITIES = ("Softmax", "LogSoftmax", "Sigmoid")
PASS_THROUGH = ("Identity", "Cast")  # ops that leave a value's meaning as it was

# field numbers in onnx.proto (ModelProto.graph, GraphProto.node, NodeProto.*, AttributeProto.*)
_MODEL_GRAPH, _GRAPH_NODE, _MODEL_OPSET = 7, 1, 8
_OPSET_DOMAIN, _OPSET_VERSION = 1, 2
_NODE_INPUT, _NODE_OUTPUT, _NODE_OP, _NODE_ATTRIBUTE, _NODE_DOMAIN = 1, 2, 4, 5, 7
_ATTR_GRAPH, _ATTR_GRAPHS = 6, 11


class GraphError(ValueError):
    """A graph the runtime will not run: the message says which node and why."""


@dataclass
class Node:
    op_type: str
    domain: str
    inputs: list[str]
    outputs: list[str]
    subgraph: bool  # an attribute holds a graph (the body of Loop, If, Scan or a custom op)


def _varint(buf: memoryview, i: int, end: int) -> tuple[int, int]:
    value, shift = 0, 0
    while True:
        if i >= end or shift > 63:
            raise GraphError("malformed protobuf varint")
        byte = buf[i]
        value |= (byte & 0x7F) << shift
        i, shift = i + 1, shift + 7
        if byte < 0x80:
            return value, i


def _fields(buf: memoryview, start: int, end: int) -> Iterator[tuple[int, int, int]]:
    """(field number, start, end) of each length-delimited field in buf[start:end]; others skipped."""
    i = start
    while i < end:
        key, i = _varint(buf, i, end)
        field, wire = key >> 3, key & 7
        if wire == 0:
            _, i = _varint(buf, i, end)
        elif wire == 1:
            i += 8
        elif wire == 5:
            i += 4
        elif wire == 2:
            n, i = _varint(buf, i, end)
            if i + n > end:
                raise GraphError("malformed protobuf: a field runs past its message")
            yield field, i, i + n
            i += n
        else:
            raise GraphError(f"malformed protobuf: wire type {wire}")
    if i != end:
        raise GraphError("malformed protobuf: a field runs past its message")


def _text(buf: memoryview, start: int, end: int) -> str:
    return bytes(buf[start:end]).decode("utf-8", "replace")


def nodes(content: bytes) -> list[Node]:
    """The top-level nodes of the ONNX model in `content`."""
    buf = memoryview(content)
    out: list[Node] = []
    for field, start, end in _fields(buf, 0, len(buf)):
        if field != _MODEL_GRAPH:
            continue
        for gfield, gstart, gend in _fields(buf, start, end):
            if gfield != _GRAPH_NODE:
                continue
            node = Node("", "", [], [], False)
            for nfield, nstart, nend in _fields(buf, gstart, gend):
                if nfield == _NODE_OP:
                    node.op_type = _text(buf, nstart, nend)
                elif nfield == _NODE_DOMAIN:
                    node.domain = _text(buf, nstart, nend)
                elif nfield == _NODE_INPUT:
                    node.inputs.append(_text(buf, nstart, nend))
                elif nfield == _NODE_OUTPUT:
                    node.outputs.append(_text(buf, nstart, nend))
                elif nfield == _NODE_ATTRIBUTE:
                    node.subgraph |= any(a in (_ATTR_GRAPH, _ATTR_GRAPHS) for a, _, _ in _fields(buf, nstart, nend))
            out.append(node)
    return out


def default_opset(content: bytes) -> int | None:
    """The graph's own opset import of the default domain (ModelProto.opset_import), read from its bytes."""
    buf = memoryview(content)
    for field, start, end in _fields(buf, 0, len(buf)):
        if field != _MODEL_OPSET:
            continue
        domain, version, i = "", None, start
        while i < end:  # OperatorSetIdProto: domain (1, string), version (2, varint)
            key, i = _varint(buf, i, end)
            if key >> 3 == _OPSET_DOMAIN and key & 7 == 2:
                n, i = _varint(buf, i, end)
                domain, i = _text(buf, i, i + n), i + n
            elif key >> 3 == _OPSET_VERSION and key & 7 == 0:
                version, i = _varint(buf, i, end)
            else:
                return None  # not the shape an opset import has: leave the decision to ONNX Runtime
        if domain in ("", "ai.onnx"):
            return version
    return None


def onnxruntime_ops(ops: Iterable[tuple[str, str]]) -> dict[str, int]:
    """How many of each op only ONNX Runtime runs, of (op_type, domain) pairs: its com.microsoft contrib ops and
    opset 23's Attention (the fused attention of the ONNX Runtime flavour), none of which TensorRT parses."""
    found: dict[str, int] = {}
    for op, domain in ops:
        if domain == "com.microsoft" or (op == "Attention" and domain in ("", "ai.onnx")):
            name = f"{domain}.{op}" if domain else f"{op} (opset 23)"
            found[name] = found.get(name, 0) + 1
    return found


def check_not_onnxruntime_only(content: bytes, path: str | Path) -> None:
    """Refuse, in one line, to hand TensorRT a graph with ONNX Runtime's own attention ops."""
    found = onnxruntime_ops((n.op_type, n.domain) for n in nodes(content))
    if found:
        ops = ", ".join(f"{op} x{n}" for op, n in sorted(found.items()))
        raise GraphError(f"{Path(path).name} holds ONNX Runtime's own ops ({ops}), which TensorRT cannot parse: it is "
                         "the ONNX Runtime flavour; build TensorRT's from the checkpoint or the portable fp32 ONNX "
                         "(mlit-edge build ... --target tensorrt)")


def check_graph(content: bytes, path: str | Path, output: str = "logits") -> list[Node]:
    """Refuse, in one line, a graph with control flow or whose `output` is already probabilities;
    returns its nodes."""
    name = Path(path).name
    try:
        found = nodes(content)
    except GraphError as e:
        raise GraphError(f"{name}: not a readable ONNX model ({e})") from None
    for node in found:
        if node.op_type in CONTROL_FLOW or node.subgraph:
            raise GraphError(f"{name}: the graph holds a {node.op_type} node (control flow, a subgraph), which "
                             "mlit-edge never exports and whose run time the file can make unbounded; refusing it")
    producer = {o: n for n in found for o in n.outputs}
    node, seen = producer.get(output), 0
    while node is not None and node.op_type in PASS_THROUGH and node.inputs and seen < len(found):
        node, seen = producer.get(node.inputs[0]), seen + 1
    if node is not None and node.op_type in PROBABILITIES and node.domain in ("", "ai.onnx"):
        raise GraphError(f"{name}: the model's '{output}' output comes from a {node.op_type}, so it is already "
                         "probabilities; the runtime expects logits (it applies the softmax itself)")
    return found
