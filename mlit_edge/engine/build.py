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

from ..export.pipeline import export_stage
from ..export.requests import BuildRequest
from ..export.resolve import BuildPlan, resolve_plan, resolve_target
from ..export.source import Source, open_source
from ..runtime.schema import ArtifactRecord
from ..runtime.trt_env import import_trt, local_env
from .plan import BuildOptions, engine_record, write_plan

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
    sidecar. Progress lines and warnings go to the `mlit_edge` loggers. `source`: the export's source
    (`export.source.open_source`) when the caller already opened it.

    From `--onnx` with the precision it already carries (the device-side flow) this needs neither
    torch nor the onnx package: only the sidecar, TensorRT and numpy.
    """
    from .dla import check_dla_request

    check_dla_request(req.dla_core, req.precision, req.batch)  # before any work: a DLA build it cannot run
    target = resolve_target(req.target, req.frontend)  # before the source opens: a missing TensorRT fails first
    if req.frontend == "torch-tensorrt":
        from .torch_trt import require_torch_tensorrt

        require_torch_tensorrt(req.precision)
    trt = import_trt(target[0]) if target[0] in ("tensorrt", "tensorrt-rtx") and req.frontend == "onnx" else None
    source = source or open_source(req, req.onnx)
    # where TensorRT itself builds (the device), its version decides the profile
    plan = resolve_plan(req, source, target, trt.__version__ if trt is not None and target[0] == "tensorrt" else None)
    for note in plan.notes:
        logger.info(note)
    with export_stage(plan, source, req) as exported:
        final = exported.final
        notes = [plan.target_note] if plan.target_note else []
        if plan.engine is None:
            logger.info(f"[build] artifact for ONNX Runtime: {final.path} (+ {final.path.name}.json)")
            return BuildResult(final.path, final.record, final.path, plan.target, notes, final.coverage,
                               final.calibration_reused)
        result = _engine(req, plan, source.model, final.path, final.record, trt)
        record = write_plan(result["engine"], plan.engine, engine_record(final.path, final.record, final.sha256,
                                                                         result, local_env(plan.target), plan.target,
                                                                         plan.frontend,
                                                                         plan.device.record() if plan.device else None))
        if "dla" in result["flags"]:
            from .dla import format_placement

            logger.info(f"      {format_placement(result['flags']['dla'])}")
        logger.info(f"      {plan.engine}: {record['bytes'] / 1e6:.2f} MB, {result.get('layers')} layers, "
                    f"{result['build_s']} s "
                    f"(+ {plan.engine.name}.json)")
        return BuildResult(plan.engine, ArtifactRecord.of(record), final.path, plan.target, notes, final.coverage,
                           final.calibration_reused)


def _engine(req: BuildRequest, plan: BuildPlan, model, final: Path, final_record: ArtifactRecord, trt) -> dict:
    """The serialized engine of `final`, through TensorRT's ONNX parser or torch-tensorrt."""
    strongly = plan.strongly_typed
    if not strongly and req.frontend == "onnx":
        logger.info(f"[build] {plan.device.describe()}: EXPLICIT_BATCH, builder flags for {req.precision}, "
                    f"{len(final_record.fp32_layers)} ONNX nodes pinned to fp32 (OBEY_PRECISION_CONSTRAINTS)")
    elif plan.target == "tensorrt-rtx" and plan.device is not None and not plan.device.strongly_typed:
        logger.info(f"note: TensorRT-RTX builds strongly typed only: this plan shows that the {plan.device.name} graph "
                    f"parses and builds; the Jetson builds its own, weakly typed (mlit-edge build --onnx on it)")
    opts = BuildOptions(req.profile, req.workspace, req.timing_cache, req.dla_core, strongly,
                        req.precision, final_record.fp32_layers)
    if plan.frontend == "torch-tensorrt":
        from ..export.static import to_deploy
        from .torch_trt import torch_tensorrt_engine

        logger.info(f"[build] torch-tensorrt: compiling to_deploy(model) into {plan.engine}")
        cfg = model.cfg
        return torch_tensorrt_engine(to_deploy(model), req.precision, opts,
                                     (1, cfg.in_chans, cfg.img_size, cfg.img_size), plan.batch)
    from .plan import build_serialized

    lo, opt, hi = opts.profile
    logger.info(f"[build] {trt.__name__} {trt.__version__}: {'strongly' if strongly else 'weakly'} typed engine from "
                f"{final.name} (batch {plan.batch or f'{lo},{opt},{hi}'})")
    result = build_serialized(final, trt, opts)
    if not result["ok"]:
        raise RuntimeError(f"{result['module']} {result['stage']} failed: " + " | ".join(result["errors"]))
    return result
