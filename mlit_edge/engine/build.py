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

from ..export import PRECISIONS
from ..export.names import artifact_name
from ..export.pipeline import ExportOptions, export_stage, fp32_base
from ..export.source import Source, open_source
from ..runtime.artifact import BATCH_PROFILE, torch_available
from ..runtime.trt_env import import_trt, local_env
from . import FRONTENDS, TARGETS
from .plan import BuildOptions, engine_record, write_plan

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class BuildRequest(ExportOptions):
    """`mlit-edge build`: the export stage's options plus what the engine step takes (the CLI's --help
    explains each field); validated here."""

    precision: str = "fp16"
    onnx: str | None = None
    target: str = "auto"
    frontend: str = "onnx"
    dynamic_batch: tuple[int, int, int] | None = None  # MIN, OPT, MAX; None: BATCH_PROFILE
    workspace: float = 1.0  # GiB
    timing_cache: str | None = None
    dla_core: int | None = None
    out: str = "artifacts"

    def __post_init__(self) -> None:
        super().__post_init__()
        choices = {"precision": PRECISIONS, "target": TARGETS, "frontend": FRONTENDS}
        for name, allowed in choices.items():
            if getattr(self, name) not in allowed:
                raise ValueError(f"--{name} {getattr(self, name)!r}: choose from {', '.join(map(str, allowed))}")
        if self.batch is not None and self.dynamic_batch is not None:
            raise ValueError("give --batch or --dynamic-batch, not both")
        lo, opt, hi = self.profile
        if not 1 <= lo <= opt <= hi:
            raise ValueError(f"--dynamic-batch {lo},{opt},{hi}: need 1 <= MIN <= OPT <= MAX")
        if self.onnx and self.checkpoint:
            raise ValueError("give --checkpoint or --onnx, not both")
        if self.random_weights and self.onnx:
            raise ValueError("--random-weights builds without weights: drop --onnx, or it")
        if self.onnx and self.frontend == "torch-tensorrt":
            raise ValueError("--frontend torch-tensorrt compiles the PyTorch model; it cannot start from --onnx")
        if self.workspace <= 0:
            raise ValueError("--workspace must be positive (GiB)")

    @property
    def profile(self) -> tuple[int, int, int]:
        return self.dynamic_batch or BATCH_PROFILE


@dataclass
class BuildResult:
    artifact: Path
    record: dict
    onnx: Path
    target: str
    notes: list[str] = field(default_factory=list)
    coverage: dict | None = None
    calibration_reused: bool | None = None


def resolve_target(target: str, frontend: str = "onnx") -> tuple[str, str | None]:
    """`auto` -> TensorRT where it imports, else ONNX Runtime (with the note that says so)."""
    if frontend == "torch-tensorrt" and target in ("auto", "tensorrt"):
        return "tensorrt", None
    if frontend == "torch-tensorrt":
        raise ValueError(f"--frontend torch-tensorrt builds TensorRT engines; it cannot target {target}")
    if target != "auto":
        return target, None
    try:
        import_trt("tensorrt")
    except RuntimeError:
        return "onnxruntime", ("note: TensorRT is not installed here, so the artifact is the ONNX for ONNX Runtime "
                               "(build the .plan on the device: mlit-edge build --onnx ... --target tensorrt)")
    return "tensorrt", None


def run_build(req: BuildRequest, source: Source | None = None) -> BuildResult:
    """Run the whole build: the export stage once (`export.pipeline.export_stage`), then, inside its locked
    folder, what a build adds: the engine and its sidecar. Progress lines and warnings go to the `mlit_edge`
    loggers. `source`: the export's source (`export.source.open_source`) when the caller already opened it.

    From `--onnx` with the precision it already carries (the device-side flow) this needs neither
    torch nor the onnx package: only the sidecar, TensorRT and numpy.
    """
    from ..runtime.graph_scan import check_not_onnxruntime_only
    from ..runtime.schema import check_runtime

    target, note = resolve_target(req.target, req.frontend)
    runtime = "onnxruntime" if target == "onnxruntime" else "tensorrt"
    if note:
        logger.info(note)
    if req.precision == "fp16" and runtime == "onnxruntime":
        logger.info("note: fp16 is not a speed format on a CPU: ONNX Runtime runs it through inserted Casts, no faster "
                    "than fp32; it is built for TensorRT on the GPU (and to measure its accuracy here)")
    if req.frontend == "torch-tensorrt":
        from .torch_trt import require_torch_tensorrt

        require_torch_tensorrt(req.precision)
    trt = import_trt(target) if target in ("tensorrt", "tensorrt-rtx") and req.frontend == "onnx" else None
    source = source or open_source(req, req.onnx)
    if source.onnx:
        check_runtime(source.record, runtime, source.onnx)
        if runtime == "tensorrt":  # a foreign file without our sidecar can still be the ONNX Runtime flavour
            check_not_onnxruntime_only(source.onnx.read_bytes(), source.onnx)
    if source.precision not in ("fp32", req.precision):
        raise ValueError(f"--onnx {req.onnx} is {source.precision}; it can only be built as {source.precision} "
                         f"(or pass the fp32 ONNX to make a {req.precision} one)")
    if source.precision != req.precision and req.precision == "int8" and runtime == "tensorrt" \
            and not torch_available():
        raise RuntimeError("INT8 calibration reads a dataset, which needs torch: calibrate on the workstation "
                           "(mlit-edge build --precision int8 --target onnxruntime) and copy the INT8 ONNX here")
    out = Path(req.out)
    plan = out / artifact_name(source.stem, req.precision, ".plan")
    engine = trt is not None or req.frontend == "torch-tensorrt"
    fp32, attention = fp32_base(out, source.stem, req.precision, runtime)
    with export_stage(req, source, fp32, (req.precision,), runtime, more_outputs=(plan,) if engine else (),
                      attention=attention) as exported:
        final = exported.variants[req.precision]
        notes = [note] if note else []
        if not engine:
            logger.info(f"[build] artifact for ONNX Runtime: {final.path} (+ {final.path.name}.json)")
            return BuildResult(final.path, final.record, final.path, target, notes, final.coverage,
                               final.calibration_reused)
        result = _engine(req, source.model, final.path, plan, trt)
        record = write_plan(result["engine"], plan, engine_record(final.path, result, local_env(target), target,
                                                                  req.frontend))
        logger.info(f"      {plan}: {record['bytes'] / 1e6:.2f} MB, {result.get('layers')} layers, "
                    f"{result['build_s']} s "
                    f"(+ {plan.name}.json)")
        return BuildResult(plan, record, final.path, target, notes, final.coverage, final.calibration_reused)


def _engine(req: BuildRequest, model, final: Path, plan: Path, trt) -> dict:
    """The serialized engine of `final`, through TensorRT's ONNX parser or torch-tensorrt."""
    opts = BuildOptions(req.profile, req.workspace, req.timing_cache, req.dla_core)
    if req.frontend == "torch-tensorrt":
        from ..export.static import to_deploy
        from .torch_trt import torch_tensorrt_engine

        logger.info(f"[build] torch-tensorrt: compiling to_deploy(model) into {plan}")
        cfg = model.cfg
        return torch_tensorrt_engine(to_deploy(model), req.precision, opts,
                                     (1, cfg.in_chans, cfg.img_size, cfg.img_size), req.batch)
    from .plan import build_serialized

    lo, opt, hi = req.profile
    logger.info(f"[build] {trt.__name__} {trt.__version__}: strongly typed engine from {final.name} "
                f"(batch {req.batch or f'{lo},{opt},{hi}'})")
    result = build_serialized(final, trt, opts)
    if not result["ok"]:
        raise RuntimeError(f"{result['module']} {result['stage']} failed: " + " | ".join(result["errors"]))
    return result
