"""`mlit-edge build`: checkpoint (or size, or ONNX) -> precision ONNX -> engine, with provenance.

Steps: export the fp32 ONNX through `to_deploy` (checked against PyTorch), make the precision
variant (`export.variants.make_variant`: fp16 casts, or INT8 QDQ from a stratified, routing-checked,
cached calibration), measured on the held-out split, then build the `.plan` with TensorRT(-RTX), or
stop at the ONNX for ONNX Runtime. Each artifact and its sidecar are published together, once,
with everything measured, so a killed build leaves no partial artifact under a final name.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from ..export import DEFAULT_OPSET, OPSETS, PRECISIONS
from ..export.calibration import MIN_EXPERT_TOKENS
from ..runtime.artifact import BATCH_PROFILE, torch_available
from ..runtime.sidecar import read_sidecar, user_fields
from ..runtime.trt_env import import_trt, local_env
from . import FRONTENDS, TARGETS
from .builder import BuildOptions, engine_record, write_plan



@dataclass(frozen=True)
class BuildRequest:
    """Everything `mlit-edge build` takes (the CLI's --help explains each field); validated here."""

    precision: str = "fp16"
    size: str | None = None
    checkpoint: str | None = None
    onnx: str | None = None
    target: str = "auto"
    frontend: str = "onnx"
    batch: int | None = None
    dynamic_batch: tuple[int, int, int] | None = None  # MIN, OPT, MAX; None: BATCH_PROFILE
    workspace: float = 1.0  # GiB
    timing_cache: str | None = None
    dla_core: int | None = None
    calib_data: str | None = None  # dataset, ImageFolder or recipe JSON; None: the model's dataset, else mnist5k
    calib_n: int = 512
    calib_seed: int = 0
    calib_cache: str | None = None  # a folder; None disables the cache
    min_expert_tokens: int = MIN_EXPERT_TOKENS
    out: str = "artifacts"
    num_classes: int = 10
    opset: int = DEFAULT_OPSET
    data_root: str = "data"
    evaluate: bool = True
    force: bool = False  # replace artifacts of another source (checkpoint, random weights) in --out
    random_weights: bool = False  # no checkpoint: random weights even where a pretrained model ships

    def __post_init__(self) -> None:
        choices = {"precision": PRECISIONS, "target": TARGETS, "frontend": FRONTENDS, "opset": OPSETS}
        for name, allowed in choices.items():
            if getattr(self, name) not in allowed:
                raise ValueError(f"--{name} {getattr(self, name)!r}: choose from {', '.join(map(str, allowed))}")
        if self.batch is not None and self.dynamic_batch is not None:
            raise ValueError("give --batch or --dynamic-batch, not both")
        lo, opt, hi = self.profile
        if not 1 <= lo <= opt <= hi:
            raise ValueError(f"--dynamic-batch {lo},{opt},{hi}: need 1 <= MIN <= OPT <= MAX")
        if self.batch is not None and self.batch < 1:
            raise ValueError("--batch must be at least 1")
        if self.onnx and self.checkpoint:
            raise ValueError("give --checkpoint or --onnx, not both")
        if self.random_weights and (self.checkpoint or self.onnx):
            raise ValueError("--random-weights builds without weights: drop --checkpoint / --onnx, or it")
        if self.onnx and self.frontend == "torch-tensorrt":
            raise ValueError("--frontend torch-tensorrt compiles the PyTorch model; it cannot start from --onnx")
        if self.size is not None and self.size != self.size.lower():
            raise ValueError(f"--size {self.size!r}: sizes are lower case")
        for name in ("calib_n", "min_expert_tokens", "num_classes"):
            if getattr(self, name) < 1:
                raise ValueError(f"--{name.replace('_', '-')} must be at least 1")
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


def _reusable(fp32: Path, info: dict, req: BuildRequest) -> bool:
    """An fp32 export already in place from the same checkpoint, opset, batch and mlit-edge version."""
    from .. import __version__

    if not info.get("checkpoint_sha256") or not fp32.is_file():
        return False
    try:
        rec = read_sidecar(fp32)
    except (OSError, ValueError):
        return False
    return (rec.get("checkpoint_sha256") == info["checkpoint_sha256"] and rec.get("opset") == req.opset
            and rec.get("batch") == (req.batch or "dynamic") and rec.get("probe") is False
            and rec.get("mlit_edge_version") == __version__ and (rec.get("parity") or {}).get("max_abs_err") is not None)


def _source_precision(path: Path) -> tuple[str, dict]:
    """The precision an existing ONNX carries (sidecar, else its metadata), and its sidecar fields."""
    try:
        record = user_fields(read_sidecar(path))
        return record.get("precision", "fp32"), record
    except FileNotFoundError:
        pass
    from ..runtime.runners import load_onnx  # only without a sidecar: a device with one needs no onnx package

    model = load_onnx(path, load_external_data=False)
    meta = {p.key: p.value for p in model.metadata_props}
    if "mlit_edge" not in meta:
        raise ValueError(f"{path} has neither a sidecar nor mlit-edge metadata: export it with mlit-edge export")
    info = json.loads(meta["mlit_edge"])
    return info.get("precision", "fp32"), {"classes": info.get("classes"), "preprocess": info.get("preprocess"),
                                           "model": info.get("model"), "precision": info.get("precision", "fp32")}


def _plan_outputs(req: BuildRequest, out: Path, stem: str, src_precision: str, runtime: str) -> list[Path]:
    """Every artifact this build will write, so that none of them is replaced by accident."""
    from ..export.variants import artifact_name

    paths = [] if req.onnx else [out / artifact_name(stem, "fp32")]
    if req.precision != src_precision:
        paths.append(out / artifact_name(stem, req.precision, runtime=runtime))
    if runtime == "tensorrt":
        paths.append(out / artifact_name(stem, req.precision, ".plan"))
    return paths


def run_build(req: BuildRequest, log: Callable[[str], None] = print, source: tuple | None = None) -> BuildResult:
    """Run the whole build; `log` gets progress lines and warnings. `source` is (model, info) from
    `export.source.load_for_export` when the caller already loaded the checkpoint.

    From `--onnx` with the precision it already carries (the device-side flow) this needs neither
    torch nor the onnx package: only the sidecar, TensorRT and numpy.
    """
    from ..export.variants import artifact_name, artifact_stem
    from ..runtime.outputs import guard_replace, output_folder
    from ..runtime.schema import check_runtime

    target, note = resolve_target(req.target, req.frontend)
    runtime = "onnxruntime" if target == "onnxruntime" else "tensorrt"
    if note:
        log(note)
    if req.precision == "fp16" and runtime == "onnxruntime":
        log("note: fp16 is not a speed format on a CPU: ONNX Runtime runs it through inserted Casts, no faster "
            "than fp32; it is built for TensorRT on the GPU (and to measure its accuracy here)")
    if req.frontend == "torch-tensorrt":
        from .torch_trt import require_torch_tensorrt

        require_torch_tensorrt(req.precision)
    trt = import_trt(target) if target in ("tensorrt", "tensorrt-rtx") and req.frontend == "onnx" else None
    model = None
    if req.onnx:
        src = Path(req.onnx)
        if not src.is_file():
            raise FileNotFoundError(f"--onnx {src} does not exist")
        src_precision, src_record = _source_precision(src)
        check_runtime(src_record, runtime, src)
        size = (src_record.get("model") or {}).get("size")
    else:
        from ..export.source import load_for_export

        model, src_record = source or load_for_export(req.checkpoint, req.size or (None if req.checkpoint else "xxs"),
                                                      req.num_classes, req.random_weights)
        size, src_precision = src_record["model"]["size"], "fp32"
    if src_precision not in ("fp32", req.precision):
        raise ValueError(f"--onnx {req.onnx} is {src_precision}; it can only be built as {src_precision} "
                         f"(or pass the fp32 ONNX to make a {req.precision} one)")
    if src_precision != req.precision and req.precision == "int8" and runtime == "tensorrt" and not torch_available():
        raise RuntimeError("INT8 calibration reads a dataset, which needs torch: calibrate on the workstation "
                           "(mlit-edge build --precision int8 --target onnxruntime) and copy the INT8 ONNX here")
    from ..train.pretrained import weights_banner

    banner = weights_banner(src_record, bool(req.checkpoint or req.onnx))
    if banner:
        log(banner)
    stem = artifact_stem(req.onnx) if req.onnx else f"mlit-{size}"
    with output_folder(req.out, log) as out:
        for path in _plan_outputs(req, out, stem, src_precision, runtime):
            guard_replace(path, src_record, req.force)
        # 1. the fp32 ONNX (or the given one)
        fp32 = Path(req.onnx) if req.onnx else out / artifact_name(stem, "fp32")
        if req.onnx:
            log(f"[1/4] source ONNX {fp32} ({src_precision})")
        elif _reusable(fp32, src_record, req):
            log(f"[1/4] reusing {fp32}: same checkpoint, opset and batch, checked against PyTorch when written")
        else:
            from ..export.onnx_export import export_onnx
            from ..export.variants import measure

            log(f"[1/4] export {fp32} (opset {req.opset}, batch {req.batch or 'dynamic'}) and check it against "
                "PyTorch")
            evaluate = req.evaluate and req.precision == "fp32"  # a variant's own accuracy is what counts
            rec = export_onnx(model, fp32, src_record, opset=req.opset, batch=req.batch,
                              measure=lambda tmp, r: measure(tmp, r, None, evaluate, req.data_root, log, step=None))
            log(f"      ONNX Runtime vs PyTorch: max abs logit error {rec['parity']['max_abs_err']:.2e}")
        # 2-3. the precision variant, measured before it is published
        coverage = reused = None
        if src_precision == req.precision:
            final = fp32
            log(f"[2/4] {req.precision}: the source already carries it")
        else:
            from ..export.calibration import resolve_recipe
            from ..export.variants import make_variant

            recipe = resolve_recipe(req.calib_data, req.calib_n, req.calib_seed,
                                    (src_record.get("preprocess") or {}).get("dataset"))
            variant = make_variant(fp32, req.precision, model, recipe, req.data_root, req.calib_cache,
                                   req.min_expert_tokens, req.evaluate and torch_available(), log, folder=out,
                                   runtime=runtime)
            final, coverage, reused = variant.path, variant.coverage, variant.calibration_reused
        record = read_sidecar(final)
        if final == fp32:
            top1 = (record.get("accuracy") or {}).get("top1")
            log(f"[3/4] top-1 measured on export: {top1:.4f}" if top1 is not None else
                "[3/4] accuracy not measured (random weights, --no-eval, or no dataset recorded)")
        notes = [note] if note else []
        if target == "onnxruntime":
            log(f"[4/4] artifact for ONNX Runtime: {final} (+ {final.name}.json)")
            return BuildResult(final, record, final, target, notes, coverage, reused)
        # 4. the engine
        plan = out / artifact_name(stem, req.precision, ".plan")
        result = _engine(req, model, final, plan, trt, log)
        record = write_plan(result["engine"], plan, engine_record(final, result, local_env(target), target,
                                                                  req.frontend))
        log(f"      {plan}: {record['bytes'] / 1e6:.2f} MB, {result.get('layers')} layers, {result['build_s']} s "
            f"(+ {plan.name}.json)")
        return BuildResult(plan, record, final, target, notes, coverage, reused)


def _engine(req: BuildRequest, model, final: Path, plan: Path, trt, log: Callable[[str], None]) -> dict:
    """The serialized engine of `final`, through TensorRT's ONNX parser or torch-tensorrt."""
    opts = BuildOptions(req.profile, req.workspace, req.timing_cache, req.dla_core)
    if req.frontend == "torch-tensorrt":
        from ..export.static import to_deploy
        from .torch_trt import torch_tensorrt_engine

        log(f"[4/4] torch-tensorrt: compiling to_deploy(model) into {plan}")
        cfg = model.cfg
        return torch_tensorrt_engine(to_deploy(model), req.precision, opts,
                                     (1, cfg.in_chans, cfg.img_size, cfg.img_size), req.batch)
    from .builder import build_serialized

    lo, opt, hi = req.profile
    log(f"[4/4] {trt.__name__} {trt.__version__}: strongly typed engine from {final.name} "
        f"(batch {req.batch or f'{lo},{opt},{hi}'})")
    result = build_serialized(final, trt, opts)
    if not result["ok"]:
        raise RuntimeError(f"{result['module']} {result['stage']} failed: " + " | ".join(result["errors"]))
    return result
