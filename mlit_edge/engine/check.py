"""`mlit-edge check model.onnx`: will this graph build as a TensorRT engine? The whole check lives here.

The static checks run anywhere: denied ops, opset, shapes static after inference except the batch
dimension, and a constant TopK k within TensorRT's limit (the runtime's byte-level scan,
`runtime.graph_scan`, names the ops only ONNX Runtime runs). Where `tensorrt` or `tensorrt_rtx` imports,
the graph is also parsed and built for real (strongly typed), and the parser's own errors are shown.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from ..export import OPSETS
from ..runtime.artifact import BATCH_PROFILE
from ..runtime.graph_scan import onnxruntime_ops
from ..runtime.messages import first_line
from ..runtime.profiles import DeviceProfile
from ..runtime.trt_env import import_trt
from .plan import BuildOptions, build_serialized

DENIED = {"NonZero", "Scatter", "ScatterND", "ScatterElements", "If", "Loop", "RandomNormal", "RandomNormalLike",
          "RandomUniform", "RandomUniformLike", "Multinomial", "Bernoulli"}
TOPK_MAX = 3840  # onnx-tensorrt 10.1-GA docs/operators.md, TopK: "`K` input must be less than 3840"


@dataclass
class Report:
    """What `check` found: problems fail the check, notes do not."""

    path: str
    opset: int | None = None
    ops: dict[str, int] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    layer_nodes: list[int] = field(default_factory=list)  # ONNX nodes of each encoder layer, in order
    build: dict | None = None  # TensorRT parse/build result, when a TensorRT module is installed
    profile: str | None = None  # the device profile checked against (runtime.profiles)
    table: str | None = None  # the operator table's source (onnx-tensorrt branch and commit)
    onnxruntime_ops: dict[str, int] = field(default_factory=dict)  # ops only ONNX Runtime runs (no build is tried)
    fusion: list[dict] = field(default_factory=list)  # per layer: attention vs TensorRT's fusion rules (engine.fusion)
    layernorm: str | None = None  # how LayerNorm is written (engine.fusion.layernorm_form)

    @property
    def ok(self) -> bool:
        return not self.problems and (self.build is None or self.build.get("ok", False))


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


def _load(path: Path):
    from ..runtime.runners import load_onnx

    if not path.is_file():
        raise FileNotFoundError(f"{path} does not exist")
    return load_onnx(path)


def _constants(model) -> dict:
    """Initializers and Constant-node outputs, as numpy arrays."""
    from onnx import numpy_helper

    consts = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    for node in model.graph.node:
        if node.op_type == "Constant":
            for attr in node.attribute:
                if attr.name == "value":
                    consts[node.output[0]] = numpy_helper.to_array(attr.t)
    return consts


def static_checks(path: str | Path, profile: DeviceProfile | None = None) -> Report:
    """Everything that needs no TensorRT. `profile`: check the ops and opset against that TensorRT's own
    operator table (`parser_checks`); without one, against TensorRT 10's opsets."""
    import onnx

    path = Path(path)
    model = _load(path)
    rep = Report(str(path))
    rep.opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), None)
    rep.onnxruntime_ops = onnxruntime_ops((n.op_type, n.domain) for n in model.graph.node)
    if rep.onnxruntime_ops:  # one line for the cause (its opset 23 is part of it)
        ops = ", ".join(f"{op} x{n}" for op, n in sorted(rep.onnxruntime_ops.items()))
        rep.problems.append(f"ONNX Runtime's own ops ({ops}): TensorRT cannot parse them; this is the ONNX Runtime "
                            "flavour (fused attention), so build TensorRT's from the checkpoint or the portable fp32 "
                            "ONNX (opset 18-20)")
    elif profile is None and rep.opset not in OPSETS:
        rep.problems.append(f"opset {rep.opset}: use {OPSETS[0]}-{OPSETS[-1]} (native LayerNormalization, "
                            "no opset-23 Attention)")
    for node in model.graph.node:
        rep.ops[node.op_type] = rep.ops.get(node.op_type, 0) + 1
    if profile is not None and not rep.onnxruntime_ops:
        parser_checks(rep, model, profile)
    rep.layer_nodes = nodes_per_layer(model)
    if not rep.onnxruntime_ops:  # a prediction from documented rules; it never fails the check
        from dataclasses import asdict

        from ..runtime.profiles import DEFAULT, PROFILES
        from .fusion import attention_fusion, layernorm_form

        fused_for = profile or PROFILES[DEFAULT]
        rep.fusion = [{**asdict(f), "fusable": f.fusable} for f in attention_fusion(model, fused_for)]
        rep.layernorm, rep.profile = layernorm_form(model), rep.profile or fused_for.name
    from ..runtime.uint8_io import uint8_problems

    rep.problems += uint8_problems(model)  # TensorRT's kUINT8 rule, the same on 8.5, 8.6 and 10.x
    for op in sorted(set(rep.ops) & DENIED):
        rep.problems.append(f"denied op {op} x{rep.ops[op]} (data-dependent shapes or control flow)")
    foreign = {n.domain for n in model.graph.node if n.domain not in ("", "ai.onnx", "com.microsoft")}
    if foreign:
        rep.notes.append(f"custom op domains {sorted(foreign)}: TensorRT needs plugins for them")

    inputs = [i for i in model.graph.input if i.name not in {t.name for t in model.graph.initializer}]
    batch = {d.dim_param for i in inputs for d in i.type.tensor_type.shape.dim[:1] if d.dim_param}
    for i in inputs:
        for d in list(i.type.tensor_type.shape.dim)[1:]:
            if not d.HasField("dim_value"):
                rep.problems.append(f"input {i.name} has a dynamic non-batch dimension {d.dim_param or '?'}")
    try:
        inferred = onnx.shape_inference.infer_shapes(model)
    except Exception as e:
        rep.problems.append(f"shape inference failed: {first_line(e, 200)}")
        inferred = model
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
    consts = _constants(model)
    for node in model.graph.node:
        if node.op_type == "TopK":
            k = consts.get(node.input[1]) if len(node.input) > 1 else None
            if k is None:
                rep.problems.append(f"TopK {node.name}: k is computed at run time; TensorRT needs a constant")
            elif int(k.reshape(-1)[0]) >= TOPK_MAX:
                rep.problems.append(f"TopK {node.name}: k={int(k.reshape(-1)[0])}; TensorRT needs K < {TOPK_MAX}")
    return rep


def parser_checks(rep: Report, model, profile: DeviceProfile) -> None:
    """The graph against the ONNX parser of the profile's TensorRT: its opset range, each op's Supported column
    and the restrictions this graph can break, from onnx-tensorrt's docs/operators.md on that release's branch
    (`trt_sources.op_table`, which says which branch). A prediction from NVIDIA's table, not a parse."""
    from .trt_sources import op_table

    table = op_table(profile.tensorrt if "." in profile.tensorrt else f"{profile.tensorrt}.0")
    rep.profile, rep.table = profile.name, table.source
    where = f"TensorRT {profile.tensorrt}'s parser ({profile.name})"
    if rep.opset is not None and rep.opset > table.max_opset:
        rep.problems.append(f"opset {rep.opset}: {where} reads opset {table.max_opset} at most; export with "
                            f"--jetpack {profile.jetpack or '...'}")
    if rep.opset is not None and table.min_opset and rep.opset < table.min_opset:
        rep.problems.append(f"opset {rep.opset}: {where} reads opset {table.min_opset} and newer")
    from ..runtime.uint8_io import uint8_input_allowed, uint8_inputs

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
        computed = [n.name for n in model.graph.node if n.op_type == "TopK" and n.input[1] not in weights]
        if computed:
            rep.problems.append(f"TopK x{len(computed)}: {where} needs K as an initializer, not a node's output "
                                f"(e.g. {computed[0]})")
    if "`sorted` must be 1" in table.restrictions("TopK"):  # 10.1-GA
        unsorted = [n.name for n in model.graph.node if n.op_type == "TopK"
                    and any(a.name == "sorted" and a.i == 0 for a in n.attribute)]
        if unsorted:
            rep.problems.append(f"TopK x{len(unsorted)}: {where} needs sorted=1 (e.g. {unsorted[0]})")


def format_report(rep: Report) -> str:
    lines = [f"{rep.path}: opset {rep.opset}, {sum(rep.ops.values())} nodes, "
             f"ops: {', '.join(f'{k} {v}' for k, v in sorted(rep.ops.items()))}"]
    if rep.layer_nodes:
        per = sorted(set(rep.layer_nodes))
        lines.append(f"  {'/'.join(map(str, per))} nodes per encoder layer x {len(rep.layer_nodes)}, "
                     f"{sum(rep.ops.values()) - sum(rep.layer_nodes)} outside them (patch embedding, head)")
    if rep.table:
        lines.append(f"  checked against {rep.profile}'s operator table: {rep.table} (a prediction from NVIDIA's "
                     "documented table, not a parse by that TensorRT)")
    from .fusion import format_fusion

    lines += format_fusion(rep.fusion, rep.layernorm, rep.profile)
    lines += [f"  FAIL {p}" for p in rep.problems]
    lines += [f"  note {n}" for n in rep.notes]
    if rep.build:
        b = rep.build
        if b["ok"]:
            typed = "strongly" if b.get("flags", {}).get("strongly_typed", True) else "weakly"
            lines.append(f"  {b['module']} {b['version']}: parsed and built a {typed} typed engine: {b['layers']} "
                         f"layers, {b['build_s']} s, {b['engine_bytes'] / 1e6:.2f} MB")
        else:
            lines.append(f"  FAIL {b['module']} {b['version']} {b['stage']} failed:")
            lines += [f"    {e}" for e in b["errors"]]
    lines.append("OK: TensorRT-buildable" if rep.ok else "NOT TensorRT-buildable")
    return "\n".join(lines)


def trt_build(path: str | Path, trt=None, workspace_gib: float = 1.0, precision: str = "fp32",
              fp32_layers: tuple[str, ...] = ()) -> dict:
    """Parse and build an engine the way the installed TensorRT builds (strongly typed on TensorRT >= 10 and
    TensorRT-RTX, weakly on 8.x: `runtime.profiles.installed_profile`); returns layers, build time and engine
    size, or the parser's errors verbatim. Returns the serialized engine under "engine" when it builds."""
    from ..runtime.profiles import installed_profile

    trt = trt or import_trt()
    if trt is None:
        raise RuntimeError("no TensorRT here: pip install 'mlit-edge[trt-check]' (TensorRT-RTX) or use JetPack's")
    strongly = trt.__name__ != "tensorrt" or installed_profile(trt.__version__).strongly_typed
    result = build_serialized(path, trt, BuildOptions(BATCH_PROFILE, workspace_gib, strongly_typed=strongly,
                                                      precision=precision, fp32_layers=fp32_layers))
    if result["ok"]:
        result["engine_bytes"] = len(result["engine"])
    return result


def check(path: str | Path, build: bool = True, profile: DeviceProfile | None = None) -> Report:
    """Static checks (against `profile`'s operator table when given), plus a real TensorRT parse and build
    where a TensorRT module imports."""
    from ..runtime.schema import ArtifactRecord, SidecarError, check_runtime
    from ..runtime.sidecar import read_sidecar

    rep = static_checks(path, profile)
    record = ArtifactRecord.of({})
    try:
        record = ArtifactRecord.of(read_sidecar(path, verify_hash=False))
        check_runtime(record, "tensorrt", path)
    except FileNotFoundError:
        pass  # a foreign ONNX: the graph alone decides
    except SidecarError as e:
        rep.problems.append(str(e))
        return rep
    trt = import_trt() if build and not rep.onnxruntime_ops else None
    if not build:
        rep.notes.append("parse and build skipped (--no-build)")
    elif rep.onnxruntime_ops:
        rep.notes.append("parse and build skipped: TensorRT has no kernels for ONNX Runtime's own ops")
    elif trt is None:
        rep.notes.append("no tensorrt / tensorrt_rtx installed: parse and build skipped "
                         "(pip install 'mlit-edge[trt-check]')")
    else:
        result = trt_build(path, trt, precision=record.precision, fp32_layers=record.fp32_layers)
        result.pop("engine", None)
        rep.build = result
    return rep
