"""fp16: every node converted except LayerNorm (the op, or its island decomposed for TensorRT 8.5), Softmax,
the router and the head (`precision.fp32_layer_names`), which stay fp32; the graph's input and outputs keep
their types. onnxconverter-common does the conversion; `drop_fp16_round_trips` undoes the cast pairs it
leaves inside the kept regions.
"""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from ..base.messages import typed_line
from .precision import (FP32_OPS, Converted, derived_record, fp32_layer_names, fp32_source, name_nodes,
                        set_precision_meta)
from .quiet import quiet
from ..devices.uint8_io import uint8_inputs

if TYPE_CHECKING:
    from .handoff import Variant


def drop_fp16_round_trips(model, keep: set[str]) -> int:
    """Let a node kept in fp32 read another kept node's fp32 output directly where the converter left an
    fp32 -> fp16 -> fp32 Cast pair between them; returns how many Casts were dropped. onnxconverter-common
    (1.16, remove_unnecessary_cast_node) drops such a pair only for a tensor with one reader: for more, it
    compares Cast's `to` with 16 and 32 instead of 10 and 1, so a decomposed LayerNorm's centred input (read
    by its square and its division) went through fp16."""
    from onnx import TensorProto

    def to(node) -> int | None:
        return next((a.i for a in node.attribute if a.name == "to"), None) if node.op_type == "Cast" else None

    producers = {o: n for n in model.graph.node for o in n.output}
    readers: dict[str, list] = {}
    for node in model.graph.node:
        for name in node.input:
            readers.setdefault(name, []).append(node)
    outputs, dropped = {o.name for o in model.graph.output}, set()
    for c16 in [n for n in model.graph.node if to(n) == TensorProto.FLOAT16]:
        src, c32s = producers.get(c16.input[0]), readers.get(c16.output[0], [])
        if src is None or src.name not in keep or not c32s or c16.output[0] in outputs or not all(
                to(r) == TensorProto.FLOAT and r.output[0] not in outputs and readers.get(r.output[0])
                and all(d.name in keep for d in readers[r.output[0]]) for r in c32s):
            continue
        for r in c32s:
            for d in readers[r.output[0]]:
                d.input[:] = [c16.input[0] if i == r.output[0] else i for i in d.input]
        dropped |= {c16.name, *(r.name for r in c32s)}
    gone = {o for n in model.graph.node if n.name in dropped for o in n.output}
    for node in [n for n in model.graph.node if n.name in dropped]:
        model.graph.node.remove(node)
    for vi in [v for v in model.graph.value_info if v.name in gone]:
        model.graph.value_info.remove(vi)
    return len(dropped)


def to_fp16(src: str | Path, out: str | Path, source: "Variant | None" = None) -> Converted:
    """Write to `out` the fp16 ONNX of `src`, with LayerNorm, Softmax, router and head in fp32; returns its
    sidecar fields (the caller measures the file, then publishes it with them) and its graph. `source`: the
    fp32 artifact as the run holds it (record and parsed graph), read from `src` otherwise."""
    import onnx
    from onnxconverter_common import float16

    from .legacy_graph import layernorm_island

    src, out = Path(src), Path(out)
    source = fp32_source(src, source)
    model = source.graph()
    name_nodes(model)
    island = layernorm_island(model)  # a LayerNormalization decomposed for TensorRT 8.5 stays fp32 as the op does
    keep = fp32_layer_names(model)
    # a uint8 input's Cast stays uint8 -> float32 (the converter would retype its output and not its `to`); the
    # converter then casts its output to fp16 for the patch embedding, as it does a float32 graph input
    uint8 = set(uint8_inputs(model))
    keep |= {n.name for n in model.graph.node if n.op_type == "Cast" and uint8 & set(n.input)}
    try:
        with quiet():
            converted = float16.convert_float_to_float16(model, keep_io_types=True, node_block_list=sorted(keep),
                                                         disable_shape_infer=False)
    except Exception as e:  # the converter's own failures are tracebacks from deep inside it
        raise ValueError(f"onnxconverter-common could not convert {src.name} to fp16 ({typed_line(e, 200)}); "
                         "build fp32 or int8 from it instead") from None
    drop_fp16_round_trips(converted, keep)
    set_precision_meta(converted, "fp16")
    onnx.save(converted, str(out))
    fp32_nodes = {"ops": sorted(FP32_OPS), "router_and_head": len(keep - island)}
    if island:
        fp32_nodes["layernorm_island"] = len(island)
    # the names a weakly typed TensorRT 8.x build pins to fp32 (engine.plan.pin_fp32)
    return Converted(derived_record(source, "fp16", {"fp32_nodes": fp32_nodes, "fp32_layers": sorted(keep)}),
                     converted)
