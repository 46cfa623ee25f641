"""The export stage in one call: from a source (a checkpoint, a shipped pretrained model, random
weights or an existing ONNX) to the fp32 ONNX checked against PyTorch and the precision variants asked
for, each measured and published with its sidecar. `mlit-edge export` is this; `mlit-edge build` is
this plus the engine step (`engine.build`), with the same options (`ExportOptions`).
"""
from __future__ import annotations

import contextlib
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from ..runtime.artifact import torch_available
from . import DEFAULT_OPSET, GROUPED, OPSETS, ORT_ATTENTION, PRECISIONS, export_opset
from .calibration import MIN_EXPERT_TOKENS
from .source import Source, open_source
from .names import FLAVOURS, artifact_name, variant_path
from .variants import Variant, make_variant, measure

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class ExportOptions:
    """What every export takes, for `mlit-edge export` and `mlit-edge build` alike (the CLI's --help
    explains each field); validated here."""

    checkpoint: str | None = None
    size: str | None = None
    num_classes: int = 10
    opset: int = DEFAULT_OPSET
    batch: int | None = None
    calib_data: str | None = None  # dataset, ImageFolder or recipe JSON; None: the model's dataset, else mnist5k
    calib_n: int = 512
    calib_seed: int = 0
    calib_cache: str | None = None  # a folder; None disables the cache
    min_expert_tokens: int = MIN_EXPERT_TOKENS
    data_root: str = "data"
    evaluate: bool = True
    force: bool = False  # replace artifacts of another source (checkpoint, random weights) in the output folder
    random_weights: bool = False  # no checkpoint: random weights even where a pretrained model ships

    def __post_init__(self) -> None:
        if self.opset not in OPSETS:
            raise ValueError(f"--opset {self.opset!r}: choose from {', '.join(map(str, OPSETS))}")
        if self.batch is not None and self.batch < 1:
            raise ValueError("--batch must be at least 1")
        if self.size is not None and self.size != self.size.lower():
            raise ValueError(f"--size {self.size!r}: sizes are lower case")
        for name in ("calib_n", "min_expert_tokens", "num_classes"):
            if getattr(self, name) < 1:
                raise ValueError(f"--{name.replace('_', '-')} must be at least 1")
        if self.random_weights and self.checkpoint:
            raise ValueError("--random-weights builds without weights: drop --checkpoint, or it")


@dataclass(frozen=True)
class ExportRequest(ExportOptions):
    """`mlit-edge export`: the fp32 ONNX at `out` and the variants asked for beside it."""

    out: str = "model.onnx"
    probe: bool = False
    precisions: tuple[str, ...] = ("fp32",)

    def __post_init__(self) -> None:
        super().__post_init__()
        bad = [p for p in self.precisions if p not in PRECISIONS]
        if bad or not self.precisions:
            raise ValueError(f"--precision {','.join(self.precisions)!r}: choose from {', '.join(PRECISIONS)}")
        if not self.out.endswith(".onnx"):
            raise ValueError(f"--out {self.out}: the fp32 export's name must end in .onnx")


@dataclass
class Exported:
    """What the export stage made: the fp32 ONNX and each precision's artifact, as published."""

    source: Source
    fp32: Path
    variants: dict[str, Variant]  # by precision; fp32 included


def fp32_base(folder: Path, stem: str, precision: str, runtime: str) -> tuple[Path, str]:
    """The fp32 export that `precision` for `runtime` is made from, and its attention form: ONNX Runtime's
    fp32 and INT8 start from its fused graph (STEM-fp32-ort.onnx), everything else from the portable one."""
    if (precision, runtime) in FLAVOURS:
        return folder / artifact_name(stem, "fp32", runtime=runtime), ORT_ATTENTION
    return folder / artifact_name(stem, "fp32"), GROUPED


@contextlib.contextmanager
def export_stage(opts: ExportOptions, source: Source, fp32: Path, precisions: tuple[str, ...],
                 runtime: str = "tensorrt", probe: bool = False, more_outputs: tuple[Path, ...] = (),
                 attention: str = GROUPED) -> Iterator[Exported]:
    """The export stage in the folder of `fp32`, locked for this writer while the caller works inside
    (a build adds its plan there): every output checked first (none replaces an artifact of another
    source unless `opts.force`), then `export_artifacts`. `more_outputs`: what the caller will write.
    `attention`: the fp32 export's attention form (`fp32_base`)."""
    from ..runtime.outputs import guard_replace, output_folder

    if opts.batch is not None:
        source.check_batch(opts.batch)
    profile = getattr(opts, "dynamic_batch", None)
    if profile:
        source.check_batch(profile[2], "--dynamic-batch MAX")
    with output_folder(fp32.parent):
        planned = ([] if source.onnx else [fp32]) + [variant_path(fp32, p, runtime=runtime) for p in precisions
                                                     if p != source.precision]
        for path in (*planned, *more_outputs):
            guard_replace(path, source.record, opts.force)
        yield export_artifacts(opts, source, fp32, precisions, runtime, probe, attention)


def export_artifacts(opts: ExportOptions, source: Source, fp32: Path, precisions: tuple[str, ...],
                     runtime: str = "tensorrt", probe: bool = False, attention: str = GROUPED) -> Exported:
    """The stage's three steps, into the folder of `fp32` (locked by the caller: `export_stage`): the fp32
    ONNX, each variant of `precisions`, and what each computes (parity against PyTorch, top-1 on the
    held-out split).

    `runtime` picks each precision's flavour (`names.FLAVOURS`): the INT8 of a TensorRT target is QDQ in
    TensorRT's recipe, that of ONNX Runtime integer matmuls. `attention` is the fp32 export's form: the
    portable "grouped", or a fused kernel for ONNX Runtime (`export.ATTENTION_FORMS`)."""
    folder, opset = fp32.parent, export_opset(attention, opts.opset)
    # 1. the fp32 ONNX (or the given one)
    if source.onnx:
        fp32 = source.onnx
        logger.info(f"[export 1/3] source ONNX {fp32} ({source.precision})")
    elif source.reusable(fp32, opset, opts.batch, probe, attention):
        logger.info(f"[export 1/3] reusing {fp32}: same checkpoint, opset, batch and attention, checked against "
                    "PyTorch when written")
    else:
        from .onnx_export import export_onnx

        fused = "" if attention == GROUPED else f", attention fused for ONNX Runtime ({attention})"
        if opset != opts.opset and opts.opset != DEFAULT_OPSET:
            logger.info(f"note: --opset {opts.opset} is the portable graph's; ONNX Runtime's fused attention needs "
                        f"opset {opset}")
        logger.info(f"[export 1/3] {fp32} (opset {opset}, batch {opts.batch or 'dynamic'}{fused}) and its check "
                    "against PyTorch")
        evaluate = opts.evaluate and "fp32" in precisions  # a variant's own accuracy is what counts
        rec = export_onnx(source.model, fp32, source.record, opset=opts.opset, batch=opts.batch, probe=probe,
                          measure=lambda tmp, r: measure(tmp, r, None, evaluate, opts.data_root, step=None),
                          attention=attention)
        logger.info(f"      ONNX Runtime vs PyTorch: max abs logit error {rec['parity']['max_abs_err']:.2e}")
    # 2-3. the precision variants, each measured before it is published
    from ..runtime.sidecar import read_sidecar

    variants = {source.precision: Variant(fp32, read_sidecar(fp32))}
    wanted = [p for p in precisions if p != source.precision]
    if not wanted:
        logger.info(f"[export 2/3] {source.precision}: the source already carries it")
    else:
        from .calibration import resolve_recipe

        recipe = resolve_recipe(opts.calib_data, opts.calib_n, opts.calib_seed,
                                (source.record.get("preprocess") or {}).get("dataset"))
        for precision in wanted:
            variants[precision] = make_variant(fp32, precision, source.model, recipe, opts.data_root,
                                               opts.calib_cache, opts.min_expert_tokens,
                                               opts.evaluate and torch_available(), folder=folder,
                                               runtime=runtime)
    if source.precision in precisions:  # the variants said theirs as they were measured
        top1 = (variants[source.precision].record.get("accuracy") or {}).get("top1")
        logger.info(f"[export 3/3] {source.precision}: top-1 measured on export: {top1:.4f}" if top1 is not None else
                    f"[export 3/3] {source.precision}: accuracy not measured (random weights, --no-eval, or no "
                    "dataset recorded)")
    return Exported(source, fp32, variants)


def run_export(req: ExportRequest) -> list[Path]:
    """`mlit-edge export`: the fp32 export, checked against PyTorch, and the variants asked for beside it
    (TensorRT's flavour); returns their paths."""
    out = Path(req.out)
    if not out.parent.is_dir():
        raise FileNotFoundError(f"output folder {out.parent} does not exist")
    source = open_source(req)
    precisions = ("fp32", *(p for p in ("fp16", "int8") if p in req.precisions))
    with export_stage(req, source, out, precisions, "tensorrt", req.probe) as exported:
        return [exported.variants[p].path for p in precisions]


__all__ = ["ExportOptions", "ExportRequest", "Exported", "export_artifacts", "export_stage", "fp32_base", "run_export"]
