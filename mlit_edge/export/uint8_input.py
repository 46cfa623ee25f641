"""`--input-dtype uint8`: a pixels graph (`--raw-input`) that reads uint8 through a Cast to float32.

A camera or decoder hands over uint8 RGB; a float32 input makes every client widen it and copy four bytes per
channel value to the device instead of one. The rewrite adds nothing the model computes: the graph's float32
input `pixels` becomes a uint8 input of the same name and shape, read by one Cast to float32 ahead of every
node. It is exact: every uint8 value is a float32, so the graph computes on the very numbers a float32 client
would send for the same pixels.

Where it runs (`devices.uint8_io` has the rule and its sources): TensorRT takes UINT8 network input from 8.5
(every JetPack this toolkit targets), converted to float or half before any other layer, which is what this
graph does; ONNX Runtime's Cast reads uint8 everywhere. DeepStream's nvinfer feeds float, so an nvinfer
config is written only for a float32 graph (`stacks.deepstream`).
"""
from __future__ import annotations

from typing import Any

CAST_NAME = "pixels_to_float"  # the node's name: a layer name TensorRT's logs and profiles show


def take_uint8(proto: Any, name: str = "pixels") -> Any:
    """`proto` (changed in place, and returned) with its float32 input `name` made uint8, read through one
    Cast to float32 that every former consumer of `name` now reads instead. Refuses an input that is not
    float32 (already uint8, or an fp16 graph's), and a name the graph does not have."""
    from onnx import TensorProto, helper

    graph = proto.graph
    found = [i for i in graph.input if i.name == name]
    if not found:
        raise ValueError(f"the graph has no input {name!r} (its inputs: {[i.name for i in graph.input]})")
    tensor = found[0].type.tensor_type
    if tensor.elem_type != TensorProto.FLOAT:
        raise ValueError(f"input {name!r} is {TensorProto.DataType.Name(tensor.elem_type)}, not FLOAT: only a "
                         "float32 pixels graph is given a uint8 input")
    as_float = f"{name}_float"
    taken = {v.name for v in graph.value_info} | {o for n in graph.node for o in n.output}
    if as_float in taken:
        raise ValueError(f"the graph already has a tensor {as_float!r}")
    for node in graph.node:
        for k, x in enumerate(node.input):
            if x == name:
                node.input[k] = as_float
    graph.node.insert(0, helper.make_node("Cast", [name], [as_float], name=CAST_NAME, to=TensorProto.FLOAT))
    tensor.elem_type = TensorProto.UINT8
    return proto
