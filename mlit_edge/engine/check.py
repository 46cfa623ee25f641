"""`mlit-edge check model.onnx`: will this graph build as a TensorRT engine? The whole check lives here.

The static checks run anywhere: denied ops, opset, shapes static after inference except the batch
dimension, and a constant TopK k within TensorRT's limit (the runtime's byte-level scan,
`artifacts.graph_scan`, names the ops only ONNX Runtime runs). Where `tensorrt` or `tensorrt_rtx` imports,
the graph is also parsed and built for real (strongly typed), and the parser's own errors are shown; a
graph that is not well-formed ONNX (`engine.malformed`) is never handed to the parser, and the parse runs in
a child process, so a crash in TensorRT is a FAIL line too. Everything printed goes through `printable`:
op, node and tensor names come from the file.
"""
from __future__ import annotations

import re
from dataclasses import asdict
from pathlib import Path

from ..export import OPSETS
from ..artifacts.graph_scan import onnxruntime_ops
from ..base.messages import first_line, printable
from ..devices.profiles import DEFAULT, PROFILES, DeviceProfile, recorded_profile
from ..devices.trt_env import import_trt
from .check_build import build_apart, trt_build  # noqa: F401 (trt_build: the API's)
from .check_report import CheckReport, format_report  # noqa: F401 (format_report: the CLI's and the tests')
from ..runtime.runners import load_onnx
from .malformed import constants, default_opset, malformed, unknown_ops
from .fusion import attention_fusion, layernorm_form
from ..devices.uint8_io import uint8_input_allowed, uint8_inputs, uint8_problems
from .trt_sources import op_table
from ..artifacts.schema import ArtifactRecord, SidecarError, check_runtime, recorded
from ..artifacts.sidecar import sha256_file
from ..artifacts.targets import PARSER_GRAPH

DENIED = {"NonZero", "Scatter", "ScatterND", "ScatterElements", "If", "Loop", "RandomNormal", "RandomNormalLike",
          "RandomUniform", "RandomUniformLike", "Multinomial", "Bernoulli"}
TOPK_MAX = 3840  # onnx-tensorrt 10.1-GA docs/operators.md, TopK: "`K` input must be less than 3840"


BLOCK = re.compile(r"/blocks\.(\d+)[:/]")


def nodes_per_layer(model) -> list[int]:
    """ONNX nodes of each encoder layer. The exporter names each node's module (`blocks.3`) in its
    metadata; a node added later without one (a Split, a Q/DQ pair) belongs to the layer of its first
    input, or of its consumer when it reads only weights."""
    layer_of: dict[str, int | None] = {}
    layers: list[int | None] = []
    for node in model.graph.node:
        scope = next((p.value for p in node.metadata_props if p.key == "namespace"), "")
        found = BLOCK.search(scope)
        layer = int(found.group(1)) if found else None
        if not scope:
            layer = next((layer_of[i] for i in node.input if layer_of.get(i) is not None), None)
        layer_of.update((out, layer) for out in node.output)
        layers.append(layer)
    consumer_layer = {i: layer for node, layer in zip(model.graph.node, layers) for i in node.input}
    counts: dict[int, int] = {}
    for node, layer in zip(model.graph.node, layers):
        scoped = any(p.key == "namespace" and p.value for p in node.metadata_props)
        if layer is None and not scoped:
            layer = next((consumer_layer.get(o) for o in node.output if consumer_layer.get(o) is not None), None)
        if layer is not None:
            counts[layer] = counts.get(layer, 0) + 1
    return [counts[i] for i in sorted(counts)]


def _load(path: Path, rep: CheckReport):
    """The model at `path`, or None with the reason as a FAIL line (an empty file, bytes that are not ONNX,
    a model without a graph); a missing path is an error, not a report."""
    if not path.is_file():
        raise FileNotFoundError(f"{path} does not exist")
    if path.stat().st_size == 0:
        rep.malformed.append("the file is empty (0 bytes): not an ONNX model")
        return None
    try:
        model = load_onnx(path)
    except ValueError as e:  # not ONNX, truncated, external data refused: one line from load_onnx
        rep.malformed.append(first_line(e))
        return None
    if not model.HasField("graph"):
        rep.malformed.append("the file holds no graph (ModelProto.graph): not an ONNX model")
        return None
    return model


def _shapes(model):
    """The model with inferred shapes, each tensor's dims (None where unknown), and shape inference's own
    refusal as a FAIL line (the model is then taken as it is)."""
    import onnx

    refused = []
    try:
        inferred = onnx.shape_inference.infer_shapes(model)
    except Exception as e:  # onnx's InferenceError, and whatever a malformed node makes it raise
        refused.append(f"shape inference failed: {first_line(e, 200)}")
        inferred = model
    dims = {vi.name: [d.dim_value if d.HasField("dim_value") else None for d in vi.type.tensor_type.shape.dim]
            for vi in [*inferred.graph.input, *inferred.graph.value_info, *inferred.graph.output]
            if vi.type.tensor_type.HasField("shape")}
    return inferred, dims, refused


def static_checks(path: str | Path, profile: DeviceProfile | None = None) -> CheckReport:
    """Everything that needs no TensorRT. `profile`: check the ops and opset against that TensorRT's own
    operator table (`parser_checks`); without one, against TensorRT 10's opsets. A graph that is not
    well-formed ONNX (engine.malformed) gets its faults as FAIL lines and no further analysis."""
    path = Path(path)
    rep = CheckReport(str(path))
    model = _load(path, rep)
    if model is None:
        rep.problems += rep.malformed
        return rep
    rep.opset = default_opset(model)
    for node in model.graph.node:
        rep.ops[node.op_type] = rep.ops.get(node.op_type, 0) + 1
    rep.layer_nodes = nodes_per_layer(model)
    inferred, dims, refused = _shapes(model)
    rep.malformed = malformed(model, dims)
    if rep.malformed:  # shape inference's refusal, if any, is one of their consequences
        rep.problems += rep.malformed
        return rep
    rep.problems += refused
    rep.onnxruntime_ops = onnxruntime_ops((n.op_type, n.domain) for n in model.graph.node)
    if rep.onnxruntime_ops:  # one line for the cause (its opset 23 is part of it)
        ops = ", ".join(f"{op} x{n}" for op, n in sorted(rep.onnxruntime_ops.items()))
        rep.problems.append(f"ONNX Runtime's own ops ({ops}): TensorRT cannot parse them; this is the ONNX Runtime "
                            "flavour (fused attention), so build TensorRT's from the checkpoint or the portable fp32 "
                            "ONNX (opset 18-20)")
    else:
        rep.problems += unknown_ops(model)
    if not rep.onnxruntime_ops and profile is None and rep.opset not in OPSETS:
        rep.problems.append(f"opset {rep.opset}: use {OPSETS[0]}-{OPSETS[-1]} (native LayerNormalization, "
                            "no opset-23 Attention)")
    if profile is not None and not rep.onnxruntime_ops:
        parser_checks(rep, model, profile)
    if not rep.onnxruntime_ops:  # a prediction from documented rules; it never fails the check
        fused_for = profile or PROFILES[DEFAULT]
        rep.fusion = [{**asdict(f), "fusable": f.fusable} for f in attention_fusion(model, fused_for, inferred)]
        rep.layernorm, rep.profile = layernorm_form(model), rep.profile or fused_for.name
    rep.problems += uint8_problems(model)  # TensorRT's kUINT8 rule, the same on 8.5, 8.6 and 10.x
    for op in sorted(set(rep.ops) & DENIED):
        rep.problems.append(f"denied op {op} x{rep.ops[op]} (data-dependent shapes or control flow)")
    foreign = {n.domain for n in model.graph.node if n.domain not in ("", "ai.onnx", "com.microsoft")}
    if foreign:
        rep.notes.append(f"custom op domains {sorted(foreign)}: TensorRT needs plugins for them")
    _static_shapes(rep, model, inferred)
    consts, _ = constants(model)
    for node in model.graph.node:
        if node.op_type == "TopK" and len(node.input) > 1:  # K holds one integer: engine.malformed made sure
            k = consts.get(node.input[1])
            if k is None:
                rep.problems.append(f"TopK {node.name!r}: k is computed at run time; TensorRT needs a constant")
            elif int(k.reshape(-1)[0]) >= TOPK_MAX:
                rep.problems.append(f"TopK {node.name!r}: k={int(k.reshape(-1)[0])}; TensorRT needs K < {TOPK_MAX}")
    return rep


def _static_shapes(rep: CheckReport, model, inferred) -> None:
    """FAIL lines for each input with a dynamic dimension besides the batch (naming it and its dims), and for
    the tensors whose inferred shapes are not static apart from the batch."""
    inputs = [i for i in model.graph.input if i.name not in {t.name for t in model.graph.initializer}]
    batch = {d.dim_param for i in inputs for d in i.type.tensor_type.shape.dim[:1] if d.dim_param}
    for i in inputs:
        dims = [d.dim_value if d.HasField("dim_value") else (d.dim_param or "?") for d in i.type.tensor_type.shape.dim]
        free = [d for d in dims[1:] if not isinstance(d, int)]
        if free:
            rep.problems.append(f"input {i.name} has dynamic non-batch dimensions {free} (its shape: {dims}): "
                                "an engine is built for one image size; export with a fixed size")
    pattern = re.compile(r"^[\d\s*+()-]*$")
    dynamic = set()
    for vi in list(inferred.graph.value_info) + list(inferred.graph.output):
        for d in vi.type.tensor_type.shape.dim:
            if d.HasField("dim_value"):
                continue
            expr = d.dim_param
            if not expr or not pattern.match(re.sub("|".join(map(re.escape, batch)) or "$^", "1", expr)):
                dynamic.add(vi.name)
    if dynamic:
        rep.problems.append(f"{len(dynamic)} tensors have shapes that are not static apart from the batch "
                            f"(e.g. {sorted(dynamic)[:3]})")


def parser_checks(rep: CheckReport, model, profile: DeviceProfile) -> None:
    """The graph against the ONNX parser of the profile's TensorRT: its opset range, each op's Supported column
    and the restrictions this graph can break, from onnx-tensorrt's docs/operators.md on that release's branch
    (`trt_sources.op_table`, which says which branch). A prediction from NVIDIA's table, not a parse."""
    table = op_table(profile.tensorrt if "." in profile.tensorrt else f"{profile.tensorrt}.0")
    rep.profile, rep.table = profile.name, table.source
    where = f"TensorRT {profile.tensorrt}'s parser ({profile.name})"
    if rep.opset is not None and rep.opset > table.max_opset:
        rep.problems.append(f"opset {rep.opset}: {where} reads opset {table.max_opset} at most; export with "
                            f"--jetpack {profile.jetpack or '...'}")
    if rep.opset is not None and table.min_opset and rep.opset < table.min_opset:
        rep.problems.append(f"opset {rep.opset}: {where} reads opset {table.min_opset} and newer")
    uint8 = uint8_inputs(model)
    if uint8 and not uint8_input_allowed(table.trt_version):
        rep.problems.append(f"UINT8 input {uint8}: {where} has no UINT8 network input (from 8.5); "
                            "export without --input-dtype uint8")
    for op in sorted(op for op in rep.ops if op != "Constant"):  # a Constant adds no layer (registerLayer)
        if not table.supported(op):
            rep.problems.append(f"{op} x{rep.ops[op]}: {where} does not support it"
                                + (" (export with --jetpack " f"{profile.jetpack}, which decomposes it)"
                                   if op == "LayerNormalization" and profile.jetpack else ""))
        elif table.restrictions(op):
            rep.notes.append(f"{op}: {where} restricts it: {table.restrictions(op)}")
    if "initializer" in table.restrictions("TopK"):  # 8.5-GA: "`K` input must be an initializer"
        weights = {t.name for t in model.graph.initializer}
        computed = [n.name for n in model.graph.node
                    if n.op_type == "TopK" and len(n.input) > 1 and n.input[1] not in weights]  # < 10: an attribute
        if computed:
            rep.problems.append(f"TopK x{len(computed)}: {where} needs K as an initializer, not a node's output "
                                f"(e.g. {computed[0]})")
    if "`sorted` must be 1" in table.restrictions("TopK"):  # 10.1-GA
        unsorted = [n.name for n in model.graph.node if n.op_type == "TopK"
                    and any(a.name == "sorted" and a.i == 0 for a in n.attribute)]
        if unsorted:
            rep.problems.append(f"TopK x{len(unsorted)}: {where} needs sorted=1 (e.g. {unsorted[0]})")


def _sidecar_profile(path: Path, rep: CheckReport, named: DeviceProfile | None):
    """The sidecar's record (empty without one) and the profile to check against: `named` (--jetpack), else
    the profile the sidecar records where its sha256 is this graph's (a note says so), else None. A profile
    the sidecar records that this mlit-edge does not know is a FAIL line."""
    try:
        record = recorded(path, verify_hash=False)
    except FileNotFoundError:
        return ArtifactRecord(), named  # a foreign ONNX: the graph alone decides
    if named is not None:
        return record, named
    if record.sha256 != sha256_file(path):
        rep.notes.append("its sidecar does not match the graph (sha256 differs): the profile it records is not used")
        return record, None
    try:
        made_for = recorded_profile(record)
    except ValueError as e:
        rep.problems.append(str(e))
        return record, None
    if made_for is not None:
        rep.notes.append(f"checked against {made_for.name}, the profile its sidecar records (the sidecar's sha256 "
                         "matches the graph); --jetpack checks against another")
    return record, made_for


def check(path: str | Path, build: bool = True, profile: DeviceProfile | None = None) -> CheckReport:
    """Static checks (against `profile`'s operator table when given, else the one the graph's own sidecar
    records), plus a real TensorRT parse and build where a TensorRT module imports and the graph is
    well-formed ONNX."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{printable(path)} does not exist")
    pre = CheckReport(str(path))
    record, profile = _sidecar_profile(path, pre, profile)
    rep = static_checks(path, profile)
    rep.problems, rep.notes = pre.problems + rep.problems, pre.notes + rep.notes
    try:
        check_runtime(record, PARSER_GRAPH, path)
    except SidecarError as e:
        rep.problems.append(str(e))
        return rep
    skip = (None if build else "parse and build skipped (--no-build)") or \
        ("parse and build skipped: the graph is not well-formed ONNX (the FAIL lines above), and TensorRT's parser "
         "is not handed such graphs" if rep.malformed else None) or \
        ("parse and build skipped: TensorRT has no kernels for ONNX Runtime's own ops" if rep.onnxruntime_ops else None)
    trt = import_trt() if skip is None else None
    if skip is None and trt is None:
        skip = "no tensorrt / tensorrt_rtx installed: parse and build skipped (pip install 'mlit-edge[trt-check]')"
    if skip:
        rep.notes.append(skip)
    else:
        rep.build = build_apart(path, trt, record.precision, record.fp32_layers)
    return rep
