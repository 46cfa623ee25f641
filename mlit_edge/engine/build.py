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
from dataclasses import dataclass, field, replace
from pathlib import Path

from ..export.pipeline import export_stage
from ..export.requests import BuildRequest
from ..export.flavours import artifact_name
from ..export.resolve import BuildPlan, resolve_plan, resolve_target
from ..export.source import Source, open_source
from ..artifacts.schema import ArtifactRecord
from ..devices.trt_env import import_trt, local_env
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

    target = resolve_target(req.target, req.frontend)  # before the source opens: a missing TensorRT fails first
    check_dla_request(req.dla_core, req.precision, req.batch, target[0])  # before any work: one the DLA cannot run
    if req.frontend == "torch-tensorrt":
        from .torch_trt import require_torch_tensorrt

        require_torch_tensorrt(req.precision)
    dla_int8 = req.dla_core is not None and req.precision == "int8"
    if dla_int8 and (target[0] != "tensorrt" or req.frontend != "onnx"):  # before TensorRT(-RTX) is imported
        from .dla import check_dla_int8

        check_dla_int8(target[0], None, req.onnx, req.frontend)
    trt = import_trt(target[0]) if target[0] in ("tensorrt", "tensorrt-rtx") and req.frontend == "onnx" else None
    if dla_int8:  # calibrated INT8 from the fp32 graph (engine/dla_int8.py); a Q/DQ ONNX is refused
        from .dla import check_dla_int8

        check_dla_int8(target[0], trt, req.onnx)
    source = source or open_source(req, req.onnx)
    if source.onnx is not None:
        _graph_decides(source.onnx, source.record.raw)
        _well_formed(source.onnx)
    # where TensorRT itself builds (the device), its version decides the profile; the DLA's INT8 exports fp32
    plan = resolve_plan(replace(req, precision="fp32") if dla_int8 else req, source, target,
                        trt.__version__ if trt is not None and target[0] == "tensorrt" else None)
    if dla_int8 and plan.engine is not None:
        plan = replace(plan, engine=plan.engine.with_name(artifact_name(source.stem, "int8", ".plan")))
    for note in plan.notes:
        logger.info(note)
    with export_stage(plan, source, req) as exported:
        final = exported.final
        notes = [plan.target_note] if plan.target_note else []
        if plan.engine is None:
            logger.info(f"[build] artifact for ONNX Runtime: {final.path} (+ {final.path.name}.json)")
            return BuildResult(final.path, final.record, final.path, plan.target, notes, final.coverage,
                               final.calibration_reused)
        result = (_dla_int8_engine(req, plan, final.path, final.record, final.sha256, trt) if dla_int8
                  else _engine(req, plan, source.model, final.path, final.record, trt))
        fields = engine_record(final.path, final.record, final.sha256, result, local_env(plan.target), plan.target,
                               plan.frontend, plan.device.record() if plan.device else None)
        if plan.batch:  # built static from any ONNX (--onnx with a dynamic batch too): the plan has one batch
            fields["batch"] = plan.batch
        if dla_int8:  # the engine is INT8 though its source ONNX is the fp32 graph
            fields.update(precision="int8", calibration_sha256=result["flags"]["calibration"]["manifest_sha256"])
        record = write_plan(result["engine"], plan.engine, fields)
        if "dla" in result["flags"]:
            from .dla import format_placement

            logger.info(f"      {format_placement(result['flags']['dla'])}")
        logger.info(f"      {plan.engine}: {record['bytes'] / 1e6:.2f} MB, {result.get('layers')} layers, "
                    f"{result['build_s']} s "
                    f"(+ {plan.engine.name}.json)")
        return BuildResult(plan.engine, ArtifactRecord.of(record), final.path, plan.target, notes, final.coverage,
                           final.calibration_reused)


def _graph_decides(onnx: Path, record) -> None:
    """Refuse, in one line, an --onnx whose sidecar records a device profile this mlit-edge does not know, or
    one its graph contradicts (an opset or an op that profile's parser lacks): the graph is what TensorRT
    parses, so it decides, and the plan would otherwise be recorded for a device that cannot read it. Read
    with the byte-level scan (artifacts.graph_scan): a device needs no onnx package for it."""
    from ..artifacts.graph_scan import default_opset, nodes
    from ..devices.profiles import contradiction, recorded_profile

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
    from ..runtime.runners import load_onnx
    from .malformed import malformed

    faults = malformed(load_onnx(path))
    if faults:
        more = f" (and {len(faults) - 1} more: mlit-edge check lists them)" if len(faults) > 1 else ""
        raise ValueError(f"--onnx {path.name} is not well-formed ONNX: {faults[0]}{more}")


def batch_profile(req: BuildRequest, plan: BuildPlan) -> tuple[int, int, int]:
    """The optimisation profile (MIN, OPT, MAX batch) a dynamic-batch graph is built with: `--batch N` makes it
    static, N, N, N (what the DLA needs, and what the build says it does); else `--dynamic-batch` or 1/8/64."""
    return (plan.batch,) * 3 if plan.batch else req.profile


def _engine(req: BuildRequest, plan: BuildPlan, model, final: Path, final_record: ArtifactRecord, trt) -> dict:
    """The serialized engine of `final`, through TensorRT's ONNX parser or torch-tensorrt."""
    strongly = plan.strongly_typed
    if not strongly and req.frontend == "onnx":
        logger.info(f"[build] {plan.device.describe()}: EXPLICIT_BATCH, builder flags for {req.precision}, "
                    f"{len(final_record.fp32_layers)} ONNX nodes pinned to fp32 (OBEY_PRECISION_CONSTRAINTS)")
    elif plan.target == "tensorrt-rtx" and plan.device is not None and not plan.device.strongly_typed:
        logger.info(f"note: TensorRT-RTX builds strongly typed only: this plan shows that the {plan.device.name} graph "
                    f"parses and builds; the Jetson builds its own, weakly typed (mlit-edge build --onnx on it)")
    opts = BuildOptions(batch_profile(req, plan), req.workspace, req.timing_cache, req.dla_core, strongly,
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


def _dla_int8_engine(req: BuildRequest, plan: BuildPlan, final: Path, final_record: ArtifactRecord,
                     sha256: str | None, trt) -> dict:
    """The calibrated INT8 DLA engine of the fp32 `final`: the QDQ recipe's images (export/calibration.py), its
    manifest beside the plan, the TensorRT cache keyed by both hashes (engine/dla_int8.py)."""
    from ..export.calibration import calibration_set, resolve_recipe, write_manifest
    from ..artifacts.input_convention import INPUT_NAMES, convention_of, dtype_of
    from .dla_int8 import cache_path, calibration_record, make_calibrator
    from .plan import build_serialized

    assert plan.engine is not None and plan.batch is not None  # a TensorRT target; --dla-core needs --batch
    from ..runtime.artifact import torch_available

    if not torch_available():  # export.calibration reads its data set through train.data, which is torch's
        raise RuntimeError("--dla-core with --precision int8 calibrates on the recipe's images, which are read "
                           "through torch, and this machine has none (a Jetson's runtime install): not available "
                           "here yet; build it where torch and this TensorRT are both installed, or build "
                           "--dla-core with --precision fp16")
    calib = calibration_set(resolve_recipe(req.calib_data, req.calib_n, req.calib_seed, final_record.dataset),
                            req.data_root)
    write_manifest(calib.manifest, plan.engine.with_name(plan.engine.stem + ".calib.json"))
    cache = cache_path(plan.engine, calib.manifest["sha256"], sha256 or "")
    calibrator = make_calibrator(trt, calib.for_graph(INPUT_NAMES[convention_of(final_record)],
                                                      dtype_of(final_record)), plan.batch, cache)
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
