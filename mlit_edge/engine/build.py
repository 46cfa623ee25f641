"""`mlit-edge build`: the export stage (checkpoint, size or ONNX -> the precision's ONNX, measured),
then the engine step: a `.plan` built with TensorRT(-RTX), or nothing more for ONNX Runtime.

The export stage runs once (`export.pipeline.export_stage`: the fp32 ONNX through `to_deploy`,
checked against PyTorch, and the precision variant: fp16 casts, or INT8 in the target runtime's
flavour). This module adds only what a build adds: the target, the plan, its sidecar and checks. Each
artifact and its sidecar are published together, once, with everything measured, so a killed build
leaves no partial artifact under a final name.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from ..artifacts.input_convention import INPUT_NAMES
from ..base.progress import progress, shown
from ..artifacts.schema import ArtifactRecord
from ..artifacts.targets import TABLE
from ..devices.profiles import contradiction, recorded_profile
from ..devices.trt_env import import_trt, local_env
from ..export.calibration import calibration_set, write_manifest
from ..export.handoff import Variant
from ..export.pipeline import export_stage
from ..export.requests import BuildRequest
from ..export.resolve import BuildPlan, resolve_plan, resolve_target
from ..export.source import Source, open_source
from ..runtime.artifact import torch_available
from ..runtime.runners import load_onnx
from .plan import BuildOptions, build_serialized, engine_record, write_plan

logger = logging.getLogger(__name__)

__all__ = ["BuildRequest", "BuildResult", "resolve_target", "run_build"]


@dataclass
class BuildResult:
    artifact: Path
    record: ArtifactRecord
    onnx: Path
    target: str
    notes: list[str] = field(default_factory=list)
    coverage: dict | None = None
    calibration_reused: bool | None = None


def run_build(req: BuildRequest, source: Source | None = None) -> BuildResult:
    """Run the whole build: resolve its plan once (`export.resolve.resolve_plan`), carry out the export stage
    (`export.pipeline.export_stage`), then, inside its locked folder, what a build adds: the engine and its
    sidecar. Progress lines and warnings go to the `mlit_edge` loggers, the long steps' progress (`req.progress`)
    to stderr (`base.progress`). `source`: the export's source (`export.source.open_source`) when the caller
    already opened it.

    From `--onnx` with the precision it already carries (the device-side flow) this needs neither
    torch nor the onnx package: only the sidecar, TensorRT and numpy.
    """
    with shown(req.progress):
        return _build(req, source)


def _build(req: BuildRequest, source: Source | None) -> BuildResult:
    from .dla import check_dla_int8, check_dla_request

    target = resolve_target(req.target, req.frontend)  # before the source opens: a missing TensorRT fails first
    row = TABLE[target[0]]
    builder = BUILDERS.get((TABLE.get(req.frontend) or row).builder or "")
    check_dla_request(req.dla_core, req.precision, req.batch, target[0])  # before any work: one the DLA cannot run
    if builder is not None and builder.preflight is not None:
        builder.preflight()
    parsed = builder is not None and builder.imports_module  # built by the target's own module, imported here
    if req.dla_int8 and not (row.implicit_int8 and parsed):  # before TensorRT(-RTX) is imported
        check_dla_int8(target[0], None, req.onnx, req.frontend)
    trt = import_trt(target[0]) if parsed else None
    if req.dla_int8:  # calibrated INT8 from the fp32 graph (engine/dla_int8.py); a Q/DQ ONNX is refused
        check_dla_int8(target[0], trt, req.onnx)
    source = source or open_source(req, req.onnx)
    if source.onnx is not None:
        _graph_decides(source.onnx, source.record)
        _well_formed(source.onnx)
    # where TensorRT itself builds (the device), its version decides the profile
    plan = resolve_plan(req, source, target, trt.__version__ if trt is not None and row.versioned_profile else None)
    for note in plan.notes:
        logger.info(note)
    with export_stage(plan, source, req) as exported:
        final = exported.final
        notes = [plan.target_note] if plan.target_note else []
        if plan.engine is None:
            logger.info(f"[build] artifact for {row.title}: {final.path} (+ {final.path.name}.json)")
            return BuildResult(final.path, final.record, final.path, plan.target, notes, final.coverage,
                               final.calibration_reused)
        if builder.publishes:  # its artifact is more than one file, with a record of its own (OpenVINO's IR)
            with progress(f"building the {row.title} artifact"):
                record = builder.build(req, plan, source.model, final, trt)
            return BuildResult(plan.engine, record, final.path, plan.target, notes, final.coverage,
                               final.calibration_reused)
        with progress(f"building the {row.title} engine"):  # minutes on a Jetson, and TensorRT reports nothing
            result = (_dla_int8_engine if plan.dla_int8 else builder.build)(req, plan, source.model, final, trt)
        fields = engine_record(final.path, final.record, final.sha256, result, local_env(plan.target), plan.target,
                               plan.frontend, plan.device.record() if plan.device else None)
        if plan.batch:  # built static from any ONNX (--onnx with a dynamic batch too): the plan has one batch
            fields["batch"] = plan.batch
        if plan.dla_int8:  # the engine is INT8 though its source ONNX is the fp32 graph
            fields.update(precision="int8", calibration_sha256=result["flags"]["calibration"]["manifest_sha256"])
        record = write_plan(result["engine"], plan.engine, fields)
        if "dla" in result["flags"]:
            from .dla import format_placement

            logger.info(f"      {format_placement(result['flags']['dla'])}")
        logger.info(f"      {plan.engine}: {(record.nbytes or 0) / 1e6:.2f} MB, {result.get('layers')} layers, "
                    f"{result['build_s']} s "
                    f"(+ {plan.engine.name}.json)")
        return BuildResult(plan.engine, record, final.path, plan.target, notes, final.coverage,
                           final.calibration_reused)


def _graph_decides(onnx: Path, record: ArtifactRecord) -> None:
    """Refuse, in one line, an --onnx whose sidecar records a device profile this mlit-edge does not know, or
    one its graph contradicts (an opset or an op that profile's parser lacks): the graph is what TensorRT
    parses, so it decides, and the plan would otherwise be recorded for a device that cannot read it. Read
    with the byte-level scan (artifacts.graph_scan): a device needs no onnx package for it."""
    from ..artifacts.graph_scan import default_opset, nodes

    try:
        made_for = recorded_profile(record)
    except ValueError as e:
        raise ValueError(f"--onnx {onnx.name}: {e}") from None
    if made_for is None:
        return
    content = onnx.read_bytes()
    why = contradiction(made_for, default_opset(content),
                        (n.op_type for n in nodes(content) if n.domain in ("", "ai.onnx")))
    if why:
        raise ValueError(f"--onnx {onnx.name}: its sidecar records the profile {made_for.name}, but {why}; the "
                         f"graph decides, and it is not a {made_for.name} graph: export one from the checkpoint "
                         f"(mlit-edge export --jetpack {made_for.jetpack or '...'})")


def _well_formed(path: Path) -> None:
    """Refuse, in one line, an --onnx that is not well-formed ONNX (engine.malformed: `check`'s rules), before
    TensorRT's parser gets it in this process: TensorRT-RTX 1.7's crashes on some (a TopK whose K holds two
    values). Where the onnx package is absent (a device's runtime install) the parser is the only judge."""
    try:
        import onnx  # noqa: F401
    except ImportError:
        return
    from .malformed import malformed

    faults = malformed(load_onnx(path))
    if faults:
        more = f" (and {len(faults) - 1} more: mlit-edge check lists them)" if len(faults) > 1 else ""
        raise ValueError(f"--onnx {path.name} is not well-formed ONNX: {faults[0]}{more}")


def batch_profile(req: BuildRequest, plan: BuildPlan) -> tuple[int, int, int]:
    """The optimisation profile (MIN, OPT, MAX batch) a dynamic-batch graph is built with: `--batch N` makes it
    static, N, N, N (what the DLA needs, and what the build says it does); else `--dynamic-batch` or 1/8/64."""
    return (plan.batch,) * 3 if plan.batch else req.profile


def _options(req: BuildRequest, plan: BuildPlan, final: Variant) -> BuildOptions:
    return BuildOptions(batch_profile(req, plan), req.workspace, req.timing_cache, req.dla_core, plan.strongly_typed,
                        req.precision, final.record.fp32_layers)


def _parsed_engine(req: BuildRequest, plan: BuildPlan, model, final: Variant, trt) -> dict:
    """The serialized engine of `final` through the target's TensorRT ONNX parser (`trt`, imported by run_build)."""
    strongly = plan.strongly_typed
    if not strongly:
        logger.info(f"[build] {plan.device.describe()}: EXPLICIT_BATCH, builder flags for {req.precision}, "
                    f"{len(final.record.fp32_layers)} ONNX nodes pinned to fp32 (OBEY_PRECISION_CONSTRAINTS)")
    elif TABLE[plan.target].strongly_typed_only and plan.device is not None and not plan.device.strongly_typed:
        logger.info(f"note: {TABLE[plan.target].title} builds strongly typed only: this plan shows that the "
                    f"{plan.device.name} graph parses and builds; the Jetson builds its own, weakly typed (mlit-edge "
                    "build --onnx on it)")
    opts = _options(req, plan, final)

    lo, opt, hi = opts.profile
    logger.info(f"[build] {trt.__name__} {trt.__version__}: {'strongly' if strongly else 'weakly'} typed engine from "
                f"{final.path.name} (batch {plan.batch or f'{lo},{opt},{hi}'})")
    result = build_serialized(final.path, trt, opts)
    if not result["ok"]:
        raise RuntimeError(f"{result['module']} {result['stage']} failed: " + " | ".join(result["errors"]))
    return result


def _torch_engine(req: BuildRequest, plan: BuildPlan, model, final: Variant, trt) -> dict:
    """The serialized engine of to_deploy(`model`), compiled by torch-tensorrt (the ONNX only measured)."""
    from ..export.static import to_deploy
    from .torch_trt import torch_tensorrt_engine

    logger.info(f"[build] torch-tensorrt: compiling to_deploy(model) into {plan.engine}")
    cfg = model.cfg
    return torch_tensorrt_engine(to_deploy(model), req.precision, _options(req, plan, final),
                                 (1, cfg.in_chans, cfg.img_size, cfg.img_size), plan.batch)


def _dla_int8_engine(req: BuildRequest, plan: BuildPlan, model, exported: Variant, trt) -> dict:
    """The calibrated INT8 DLA engine of the fp32 `exported`: the QDQ recipe's images (export/calibration.py), its
    manifest beside the plan, the TensorRT cache keyed by both hashes (engine/dla_int8.py)."""
    final, final_record, sha256 = exported.path, exported.record, exported.sha256
    from .dla_int8 import cache_path, calibration_record, make_calibrator

    assert plan.engine is not None and plan.batch is not None  # a TensorRT target; --dla-core needs --batch

    if not torch_available():  # export.calibration reads its data set through train.data, which is torch's
        raise RuntimeError("--dla-core with --precision int8 calibrates on the recipe's images, which are read "
                           "through torch, and this machine has none (a Jetson's runtime install): not available "
                           "here yet; build it where torch and this TensorRT are both installed, or build "
                           "--dla-core with --precision fp16")
    calib = calibration_set(plan.recipe, req.data_root)
    write_manifest(calib.manifest, plan.engine.with_name(plan.engine.stem + ".calib.json"))
    cache = cache_path(plan.engine, calib.manifest["sha256"], sha256 or "")
    calibrator = make_calibrator(trt, calib.for_graph(INPUT_NAMES[final_record.input_convention],
                                                      final_record.input_dtype), plan.batch, cache)
    opts = BuildOptions(batch_profile(req, plan), req.workspace, req.timing_cache, req.dla_core, False, "int8",
                        final_record.fp32_layers, calibrator)
    logger.info(f"[build] {trt.__name__} {trt.__version__}: calibrated INT8 (IInt8EntropyCalibrator2, "
                f"{calib.manifest['images']} manifest images) from {final.name} for DLA core {req.dla_core}")
    try:
        result = build_serialized(final, trt, opts)
    finally:
        calibrator.close()
    if not result["ok"]:
        raise RuntimeError(f"{result['module']} {result['stage']} failed: " + " | ".join(result["errors"]))
    used = calib.manifest["images"] // plan.batch * plan.batch  # whole static batches (dla_int8.calibration_batches)
    result["flags"]["calibration"] = calibration_record(calib.manifest, cache, used, calibrator.reused)
    return result


def _require_torch_tensorrt() -> None:
    from .torch_trt import (
        require_torch_tensorrt,  # a device's build never loads the frontend's module
    )

    require_torch_tensorrt()


def _openvino_ir(req: BuildRequest, plan: BuildPlan, model, final: Variant, trt) -> Any:
    from .ov_build import openvino_ir  # openvino itself is imported inside

    return openvino_ir(req, plan, model, final)


def _require_openvino() -> None:
    from .ov_build import require_openvino

    require_openvino()


@dataclass(frozen=True)
class Builder:
    """How the engine step builds a target's artifact (artifacts.targets: a row's `builder` names one)."""

    build: Callable[[BuildRequest, BuildPlan, Any, Variant, Any], dict]  # (req, plan, model, final, trt) -> result
    imports_module: bool  # run_build imports the target's module before the source opens and hands it in
    preflight: Callable[[], None] | None = None  # refuses, before any work, a build this machine cannot run
    publishes: bool = False  # `build` writes the artifact and its sidecar itself and returns the record


BUILDERS = {"onnx-parser": Builder(_parsed_engine, True),
            "torch-tensorrt": Builder(_torch_engine, False, _require_torch_tensorrt),
            "openvino-ir": Builder(_openvino_ir, False, _require_openvino, publishes=True)}
