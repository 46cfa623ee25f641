"""Graphs that are not well-formed ONNX, for `mlit-edge check`: the graph-level and node-level faults that
no TensorRT build can get past, each said as a FAIL line instead of a traceback from shape inference or a
crash in the parser.

The rules are ONNX's own: a model imports a version of the default domain (ModelProto.opset_import, onnx's
docs/IR.md "Opset imports"); each node's inputs and outputs fit its operator schema's counts, with every
required (single) parameter named (`onnx.defs.get_schema`: min/max_input, min/max_output, FormalParameter
option); a Constant carries exactly one value attribute (onnx/defs/generator/defs.cc, Constant: "exactly
one"); TopK's K is "a 1-D tensor containing a single positive value" (onnx docs/Operators.md, TopK-10/11).
A graph with any of them is not handed to TensorRT's parser: TensorRT-RTX 1.7's crashes the process
(SIGSEGV) on a TopK whose K holds two values, where it should refuse it.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from ..base.messages import first_line

CONSTANT_VALUES = ("value", "value_float", "value_floats", "value_int", "value_ints", "value_string",
                   "value_strings", "sparse_value")


def default_opset(model: Any) -> int | None:
    """The version of the default ONNX domain the model imports; None when it imports none."""
    return next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), None)


def _label(node: Any) -> str:
    return f"{node.op_type} {node.name!r}" if node.name else f"{node.op_type} (unnamed)"


def _arity(node: Any, opsets: dict[str, int]) -> list[str]:
    """How `node` breaks its operator schema's input and output counts; nothing for an op onnx has no schema
    of (a custom domain's: TensorRT needs a plugin, which `check` notes)."""
    from onnx import defs

    domain = "" if node.domain == "ai.onnx" else node.domain
    if domain not in opsets:
        return []
    try:
        schema = defs.get_schema(node.op_type, opsets[domain], domain)
    except Exception:  # onnx.defs.SchemaError: no such op at that opset (the parser says so itself)
        return []
    found = []
    for kind, names, formal, low, high in (("input", node.input, schema.inputs, schema.min_input, schema.max_input),
                                           ("output", node.output, schema.outputs, schema.min_output,
                                            schema.max_output)):
        if not low <= len(names) <= high:
            want = f"{low}" if low == high else f"{low} to {high}" if high < 2 ** 31 - 1 else f"{low} or more"
            found.append(f"{_label(node)} has {len(names)} {kind}(s); ONNX's {node.op_type}-{schema.since_version} "
                         f"takes {want}")
            continue
        single = defs.OpSchema.FormalParameterOption.Single
        missing = [p.name for i, p in enumerate(formal) if p.option == single and i < len(names) and not names[i]]
        if missing:
            found.append(f"{_label(node)} leaves its required {kind} {', '.join(map(repr, missing))} unnamed")
    return found


def _topk_k(node: Any, consts: dict, shapes: dict) -> str | None:
    """What is wrong with TopK `node`'s K as ONNX defines it (one positive integer), where it can be known."""
    if len(node.input) < 2 or not node.input[1]:
        return None  # opset < 10 (K an attribute), or a missing input `_arity` already said
    k = consts.get(node.input[1])
    if k is not None:
        if k.size != 1:
            return f"TopK {node.name!r}: K holds {k.size} values; ONNX's TopK takes one (a 1-D tensor of one value)"
        if k.dtype.kind not in "iu":
            return f"TopK {node.name!r}: K is {k.dtype}; ONNX's TopK takes an int64 K"
        if int(k.reshape(-1)[0]) < 0:
            return f"TopK {node.name!r}: k={int(k.reshape(-1)[0])}; ONNX's TopK takes a positive K"
        return None
    dims = shapes.get(node.input[1])
    if dims is None or any(d is None for d in dims) or len(dims) > 1 or (dims and dims[0] != 1):
        return (f"TopK {node.name!r}: K is computed, with shape {dims if dims is not None else 'unknown'}; ONNX's "
                "TopK takes one value (a 1-D tensor of one value)")
    return None


def constants(model: Any) -> tuple[dict, list[str]]:
    """Initializers and Constant-node values as numpy arrays, and the ones whose data do not fit their type
    and shape (a FAIL each)."""
    from onnx import helper, numpy_helper

    values, bad = {}, []
    for t in model.graph.initializer:
        try:
            values[t.name] = numpy_helper.to_array(t)
        except Exception as e:  # numpy: "buffer size must be a multiple of element size", and the like
            bad.append(f"initializer {t.name!r}: its data do not fit its type and shape ({first_line(e, 120)})")
    for node in model.graph.node:
        if node.op_type != "Constant" or len(node.output) != 1:
            continue
        attrs = [a for a in node.attribute if a.name in CONSTANT_VALUES]
        if len(attrs) != 1:
            bad.append(f"{_label(node)} has {len(attrs)} value attributes; ONNX's Constant takes exactly one")
            continue
        try:
            value = helper.get_attribute_value(attrs[0])
            values[node.output[0]] = numpy_helper.to_array(value) if attrs[0].name == "value" else np.asarray(value)
        except Exception as e:
            bad.append(f"{_label(node)}: its value does not fit its type and shape ({first_line(e, 120)})")
    return values, bad


def unknown_ops(model: Any) -> list[str]:
    """A line for the default-domain ops onnx defines no schema of at the model's opset (a misspelt or invented
    op: TensorRT's parser has no importer for it, and looks for a plugin of that name), else nothing."""
    from onnx import defs

    opset = default_opset(model)
    if opset is None:
        return []
    unknown: dict[str, int] = {}
    for node in model.graph.node:
        if node.domain in ("", "ai.onnx"):
            try:
                defs.get_schema(node.op_type, opset, "")
            except Exception:  # onnx.defs.SchemaError
                unknown[node.op_type] = unknown.get(node.op_type, 0) + 1
    if not unknown:
        return []
    ops = ", ".join(f"{op!r} x{n}" for op, n in sorted(unknown.items()))
    return [f"ops ONNX does not define at opset {opset}: {ops} (TensorRT would need a plugin of that name)"]


def inferred_dims(model: Any) -> dict:
    """Each tensor's dims (None where unknown) from onnx's shape inference; {} where it refuses the graph."""
    import onnx

    try:
        graph = onnx.shape_inference.infer_shapes(model).graph
    except Exception:  # onnx.shape_inference.InferenceError: the faults below say why
        return {}
    return {vi.name: [d.dim_value if d.HasField("dim_value") else None for d in vi.type.tensor_type.shape.dim]
            for vi in [*graph.input, *graph.value_info, *graph.output] if vi.type.tensor_type.HasField("shape")}


def malformed(model: Any, shapes: dict | None = None) -> list[str]:
    """Every way `model` is not a well-formed ONNX graph, one line each (empty for a well-formed one).
    `shapes`: tensor name -> dims (None where unknown) from shape inference, where the caller ran it."""
    graph, found = model.graph, []
    shapes = inferred_dims(model) if shapes is None else shapes
    opsets = {("" if o.domain == "ai.onnx" else o.domain): o.version for o in model.opset_import}
    if "" not in opsets:
        found.append("the model imports no version of the default ONNX domain (ModelProto.opset_import): "
                     "its ops have no meaning")
    if not graph.node:
        found.append("the graph has no nodes")
    weights = {t.name for t in graph.initializer}
    inputs = [i for i in graph.input if i.name not in weights]
    if not inputs:
        found.append("the graph has no input: an engine needs a network input")
    if not graph.output:
        found.append("the graph has no output")
    for i in inputs:
        tensor = i.type.tensor_type if i.type.HasField("tensor_type") else None
        if tensor is None or not tensor.elem_type:
            found.append(f"input {i.name!r} has no tensor element type")
        elif not tensor.HasField("shape"):
            found.append(f"input {i.name!r} has no shape (not even a rank): an engine needs its dimensions")
    consts, bad = constants(model)
    found += bad
    made = weights | {i.name for i in graph.input} | {o for n in graph.node for o in n.output}
    for node in graph.node:
        found += _arity(node, opsets)
        dangling = [name for name in node.input if name and name not in made]
        if dangling:
            found.append(f"{_label(node)} reads {dangling[0]!r}, which no input, initializer or node makes")
        if node.op_type == "TopK" and node.domain in ("", "ai.onnx"):
            found += [k for k in [_topk_k(node, consts, shapes)] if k]
    return found
