"""`mlit-edge build`: checkpoint (or size, or ONNX) -> precision ONNX -> engine, with provenance.

Steps: export the fp32 ONNX through `to_deploy` (checked against PyTorch), make the precision
variant (fp16 casts, or INT8 QDQ from a stratified, routing-checked, cached calibration), measure it
on the held-out split, then build the `.plan` with TensorRT(-RTX), or stop at the ONNX for ONNX
Runtime. Every file is written atomically with its sidecar, so a killed build leaves no partial
artifact under a final name.
"""
from __future__ import annotations

import importlib.util
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from .calibrate import (MIN_EXPERT_TOKENS, Recipe, calibrate_int8, calibration_set, format_coverage,
                        load_recipe, routing_coverage, write_manifest)
from .engine import BuildOptions, engine_record, import_trt, local_env, write_plan
from .sidecar import read_sidecar, user_fields, write_sidecar

PRECISIONS = ("fp32", "fp16", "int8")
TARGETS = ("auto", "tensorrt", "tensorrt-rtx", "onnxruntime")
FRONTENDS = ("onnx", "torch-tensorrt")
RANDOM_WARNING = """\
!!! ------------------------------------------------------------------------------------------ !!!
!!! No --checkpoint: the weights are RANDOM. This artifact is good for latency and memory work  !!!
!!! only; its predictions are meaningless. Pass --checkpoint runs/.../checkpoint.pt for a model. !!!
!!! ------------------------------------------------------------------------------------------ !!!"""


@dataclass
class BuildRequest:
    """Everything `mlit-edge build` takes; see the CLI's --help for each field."""

    precision: str = "fp16"
    size: str | None = None
    checkpoint: str | None = None
    onnx: str | None = None
    target: str = "auto"
    frontend: str = "onnx"
    batch: int | None = None
    dynamic_batch: tuple[int, int, int] = (1, 8, 64)
    workspace_gib: float = 1.0
    timing_cache: str | None = None
    dla_core: int | None = None
    calib_data: str | None = None  # dataset, ImageFolder or recipe JSON; None: the model's dataset, else mnist5k
    calib_n: int = 512
    calib_seed: int = 0
    calib_cache: str | None = None  # a folder; None disables the cache
    min_expert_tokens: int = MIN_EXPERT_TOKENS
    out: str = "artifacts"
    num_classes: int = 10
    opset: int = 18
    data_root: str = "data"
    evaluate: bool = True


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
    if target not in TARGETS:
        raise ValueError(f"--target {target!r}: choose from {', '.join(TARGETS)}")
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


def _stem(req: BuildRequest, size: str | None) -> str:
    if req.onnx:
        name = Path(req.onnx).name.removesuffix(".onnx")
        for p in PRECISIONS:
            name = name.removesuffix(f"-{p}").removesuffix(f".{p}")
        return name
    return f"mlit-{size}"


def _clean_stale_temps(out: Path, stem: str) -> int:
    """Remove hidden temporaries that a killed build of the same stem left behind."""
    stale = [p for p in out.glob(f".{stem}-*.tmp") if p.is_file()]
    for p in stale:
        p.unlink(missing_ok=True)
    return len(stale)


def _has_torch() -> bool:
    """Datasets load through torch; a device installs the runtime without it."""
    try:
        return importlib.util.find_spec("torch") is not None
    except (ImportError, ValueError):
        return False


def _reusable(fp32: Path, info: dict, req: BuildRequest) -> bool:
    """An fp32 export already in place from the same checkpoint, opset, batch and mlit-edge version."""
    from . import __version__

    if not info.get("checkpoint_sha256") or not fp32.is_file():
        return False
    try:
        rec = read_sidecar(fp32)
    except (OSError, ValueError):
        return False
    return (rec.get("checkpoint_sha256") == info["checkpoint_sha256"] and rec.get("opset") == req.opset
            and rec.get("batch") == (req.batch or "dynamic") and rec.get("probe") is False
            and rec.get("mlit_edge_version") == __version__ and (rec.get("parity") or {}).get("max_abs_err") is not None)


def _recipe(req: BuildRequest, model_dataset: str | None) -> Recipe:
    if req.calib_data and req.calib_data.endswith(".json"):
        return load_recipe(req.calib_data)
    return Recipe(req.calib_data or model_dataset or "mnist5k", "train", req.calib_n, req.calib_seed)


def evaluate_onnx(path: str | Path, dataset: str, split: str = "test", data_root: str | Path = "data",
                  batch: int = 250) -> dict:
    """Top-1 of an ONNX classifier on a dataset split through ONNX Runtime (eval preprocessing)."""
    from .data import load_dataset
    from .runners import OnnxRuntimeRunner, predict_all

    ds = load_dataset(dataset, split, data_root)
    labels = ds.labels.numpy()
    with OnnxRuntimeRunner(path) as run:
        logits, _ = predict_all(run, ds.inputs(), batch)
    correct = int((logits.argmax(-1) == labels).sum())
    return {"dataset": ds.name, "split": split, "images": int(len(labels)), "top1": correct / max(1, len(labels))}


def _source_precision(path: Path) -> tuple[str, dict]:
    """The precision an existing ONNX carries (sidecar, else its metadata), and its sidecar fields."""
    try:
        record = user_fields(read_sidecar(path))
        return record.get("precision", "fp32"), record
    except FileNotFoundError:
        pass
    import onnx  # only without a sidecar: a device that has the sidecar needs no onnx package

    try:
        model = onnx.load(str(path), load_external_data=False)
    except Exception as e:
        raise ValueError(f"{path} is not an ONNX model ({type(e).__name__})") from None
    meta = {p.key: p.value for p in model.metadata_props}
    if "mlit_edge" not in meta:
        raise ValueError(f"{path} has neither a sidecar nor mlit-edge metadata: export it with mlit-edge export")
    info = json.loads(meta["mlit_edge"])
    return info.get("precision", "fp32"), {"classes": info.get("classes"), "preprocess": info.get("preprocess"),
                                           "model": info.get("model"), "precision": info.get("precision", "fp32")}


def run_build(req: BuildRequest, log: Callable[[str], None] = print) -> BuildResult:
    """Run the whole build; `log` gets progress lines and warnings.

    From `--onnx` with the precision it already carries (the device-side flow) this needs neither
    torch nor the onnx package: only the sidecar, TensorRT and numpy.
    """
    if req.precision not in PRECISIONS:
        raise ValueError(f"--precision {req.precision!r}: choose from {', '.join(PRECISIONS)}")
    if req.frontend not in FRONTENDS:
        raise ValueError(f"--frontend {req.frontend!r}: choose from {', '.join(FRONTENDS)}")
    lo, opt, hi = req.dynamic_batch
    if not 1 <= lo <= opt <= hi:
        raise ValueError(f"--dynamic-batch {lo},{opt},{hi}: need 1 <= MIN <= OPT <= MAX")
    if req.onnx and req.frontend == "torch-tensorrt":
        raise ValueError("--frontend torch-tensorrt compiles the PyTorch model; it cannot start from --onnx")
    target, note = resolve_target(req.target, req.frontend)
    notes = [note] if note else []
    if note:
        log(note)
    if req.frontend == "torch-tensorrt":
        from .engine import require_torch_tensorrt

        require_torch_tensorrt(req.precision)
    if target in ("tensorrt", "tensorrt-rtx") and req.frontend == "onnx":
        trt = import_trt(target)  # fail in one line before any work
    else:
        trt = None
    out = Path(req.out)
    out.mkdir(parents=True, exist_ok=True)

    model, info = None, None
    if req.onnx:
        src = Path(req.onnx)
        if not src.is_file():
            raise FileNotFoundError(f"--onnx {src} does not exist")
        if req.checkpoint:
            raise ValueError("give --checkpoint or --onnx, not both")
        src_precision, src_record = _source_precision(src)
        size = (src_record.get("model") or {}).get("size")
        if src_record.get("random_weights"):
            log(RANDOM_WARNING)
    else:
        from .export import load_for_export

        model, info = load_for_export(req.checkpoint, req.size or (None if req.checkpoint else "xxs"),
                                      req.num_classes)
        size, src_precision, src_record = info["model"]["size"], "fp32", info
        if info["random_weights"]:
            log(RANDOM_WARNING)
    stem = _stem(req, size)
    if (removed := _clean_stale_temps(out, stem)):
        log(f"removed {removed} temporary file(s) that an interrupted build left in {out}")

    # 1. the fp32 ONNX (or the given one)
    if req.onnx:
        fp32 = src
        log(f"[1/4] source ONNX {src} ({src_precision})")
    else:
        fp32 = out / f"{stem}-fp32.onnx"
        if _reusable(fp32, info, req):
            log(f"[1/4] reusing {fp32}: same checkpoint, opset and batch, checked against PyTorch when written")
        else:
            log(f"[1/4] export {fp32} (opset {req.opset}, batch {req.batch or 'dynamic'}) and check it against "
                "PyTorch")
            from .export import export_onnx

            rec = export_onnx(model, fp32, info, opset=req.opset, batch=req.batch)
            log(f"      ONNX Runtime vs PyTorch: max abs logit error {rec['parity']['max_abs_err']:.2e}")

    # 2. the precision variant
    coverage, reused = None, None
    if src_precision == req.precision:
        final = fp32
        log(f"[2/4] {req.precision}: the source already carries it")
    elif src_precision != "fp32":
        raise ValueError(f"--onnx {fp32} is {src_precision}; it can only be built as {src_precision} "
                         f"(or pass the fp32 ONNX to make a {req.precision} one)")
    else:
        final = out / f"{stem}-{req.precision}.onnx"
        if req.precision == "fp16":
            from .precision import to_fp16

            log(f"[2/4] fp16 {final} (LayerNorm, softmax, router and head stay fp32)")
            to_fp16(fp32, final)
        else:
            recipe = _recipe(req, (src_record.get("preprocess") or {}).get("dataset"))
            log(f"[2/4] int8: calibration set of {recipe.n} images, stratified, from {recipe.dataset} "
                f"{recipe.split} (seed {recipe.seed})")
            calib = calibration_set(recipe, req.data_root)
            manifest_path = write_manifest(calib.manifest, out / f"{stem}-int8.calib.json")
            coverage = routing_coverage(fp32, calib.images, min_tokens=req.min_expert_tokens,
                                        available=calib.manifest["split_size"])
            log(format_coverage(coverage))
            _, reused = calibrate_int8(fp32, final, calib, req.calib_cache, coverage)
            log(f"      QDQ {final}: " + ("reused the cached calibration (same model and data)" if reused else
                                          f"calibrated; manifest {manifest_path.name}"))
    record = read_sidecar(final)

    # 3. measure it: vs PyTorch where we have the model, and top-1 on the held-out split
    if model is not None and final != fp32:
        from .data import sample_images
        from .export import variant_parity

        held_out, _ = sample_images(record["preprocess"].get("dataset") or "mnist5k", "test", 1000, req.data_root)
        parity = variant_parity(final, model, held_out)
        log(f"      vs PyTorch on {parity['images']} held-out images: top-1 agreement {parity['top1_agreement']:.4f}, "
            f"max abs logit error {parity['max_abs_err']:.2e}")
    dataset = (record.get("preprocess") or {}).get("dataset")
    if req.evaluate and dataset and not record.get("random_weights") and _has_torch():
        acc = evaluate_onnx(final, dataset, "test", req.data_root)
        record = write_sidecar(final, {**user_fields(record), "accuracy": acc})
        log(f"[3/4] top-1 on {acc['dataset']} {acc['split']} ({acc['images']} images, ONNX Runtime): {acc['top1']:.4f}")
    else:
        why = ("random weights" if record.get("random_weights") else "no dataset recorded" if not dataset else
               "--no-eval" if not req.evaluate else "no torch here; the workstation's build measured it")
        log(f"[3/4] accuracy skipped ({why})")

    # 4. the engine
    if target == "onnxruntime":
        log(f"[4/4] artifact for ONNX Runtime: {final} (+ {final.name}.json)")
        return BuildResult(final, record, final, target, notes, coverage, reused)
    opts = BuildOptions((lo, opt, hi), req.workspace_gib, req.timing_cache, req.dla_core)
    env = local_env(target)
    plan = out / f"{stem}-{req.precision}.plan"
    if req.frontend == "torch-tensorrt":
        from .deploy import to_deploy
        from .engine import torch_tensorrt_engine

        log(f"[4/4] torch-tensorrt: compiling to_deploy(model) into {plan}")
        cfg = model.cfg
        result = torch_tensorrt_engine(to_deploy(model), req.precision, opts,
                                       (1, cfg.in_chans, cfg.img_size, cfg.img_size), req.batch)
    else:
        from .engine import build_serialized

        log(f"[4/4] {trt.__name__} {trt.__version__}: strongly typed engine from {final.name} "
            f"(batch {req.batch or f'{lo},{opt},{hi}'})")
        result = build_serialized(final, trt, opts)
        if not result["ok"]:
            raise RuntimeError(f"{result['module']} {result['stage']} failed: " + " | ".join(result["errors"]))
    record = write_plan(result["engine"], plan, engine_record(final, result, env, target, req.frontend))
    log(f"      {plan}: {record['bytes'] / 1e6:.2f} MB, {result.get('layers')} layers, {result['build_s']} s "
        f"(+ {plan.name}.json)")
    return BuildResult(plan, record, final, target, notes, coverage, reused)
