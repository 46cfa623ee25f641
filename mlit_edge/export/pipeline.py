"""The export stage in one call: from a source (a checkpoint, a shipped pretrained model, random
weights or an existing ONNX) to the fp32 ONNX checked against PyTorch and the precision variants the
plan names, each measured and published with its sidecar. `mlit-edge export` is this; `mlit-edge
build` is this plus the engine step (`engine.build`), with the same options (`requests.ExportOptions`).

The request is resolved once into a `BuildPlan` (`resolve.resolve_plan`); this module carries it out.
What one step hands the next is the artifact it made (`handoff.Variant`: path, typed record, parsed
graph) and the data already decoded (`handoff.HeldOut`, `variants.Inputs`), so each file is hashed, read and
parsed once.
"""
from __future__ import annotations

import contextlib
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from ..base.progress import shown
from ..devices.profiles import DEFAULT as DEFAULT_DEVICE
from . import DEFAULT_OPSET, GROUPED
from .requests import ExportOptions, ExportRequest
from .resolve import BuildPlan, resolve_plan
from .source import Source, open_source
from .variants import HeldOut, Inputs, Variant, make_variant, measure
from ..artifacts.schema import ArtifactRecord

logger = logging.getLogger(__name__)


@dataclass
class Exported:
    """What the export stage made: the fp32 ONNX and each precision's artifact, as published."""

    plan: BuildPlan
    source: Source
    fp32: Variant
    variants: dict[str, Variant]  # by precision: what the plan asked for, the source's own precision included

    @property
    def final(self) -> Variant:
        """The artifact of the last precision asked for (a build's only one)."""
        return self.variants[self.plan.precisions[-1]]


@contextlib.contextmanager
def export_stage(plan: BuildPlan, source: Source, opts: ExportOptions) -> Iterator[Exported]:
    """The export stage in the plan's output folder, locked for this writer while the caller works inside
    (a build adds its plan there): every output checked first (none replaces an artifact of another
    source unless `opts.force`), then `export_artifacts`."""
    from ..artifacts.outputs import guard_replace, output_folder

    if plan.batch is not None:
        source.check_batch(plan.batch)
    elif plan.profile is not None:
        source.check_batch(plan.profile[2], "--dynamic-batch MAX")
    with output_folder(plan.folder):
        for path in plan.outputs:
            guard_replace(path, source.record, opts.force)
        yield export_artifacts(plan, source, opts)


def export_artifacts(plan: BuildPlan, source: Source, opts: ExportOptions) -> Exported:
    """The stage's three steps, into the plan's folder (locked by the caller: `export_stage`): the fp32
    ONNX, each variant the plan names, and what each computes (parity against PyTorch, top-1 on the
    held-out split, decoded once for all of them)."""
    held_out = HeldOut(plan.dataset, opts.data_root) if plan.dataset and plan.torch else None
    fp32 = _fp32(plan, source, opts, held_out)
    variants = {source.precision: fp32}
    if not plan.variants:
        logger.info(f"[export 2/3] {source.precision}: the source already carries it")
    inputs = Inputs(source.model, plan.recipe or Inputs().recipe, opts.data_root, opts.calib_cache,
                    opts.min_expert_tokens, plan.evaluate, plan.torch, held_out)
    for v in plan.variants:
        variants[v.precision] = make_variant(fp32, v.flavour, inputs, v.path)
    for p in plan.precisions:  # a precision the target's builder applies (resolve: maker "export") is the fp32 graph
        variants.setdefault(p, fp32)
    if source.precision in plan.precisions:  # the variants said theirs as they were measured
        top1 = variants[source.precision].record.top1
        logger.info(f"[export 3/3] {source.precision}: top-1 measured on export: {top1:.4f}" if top1 is not None else
                    f"[export 3/3] {source.precision}: accuracy not measured (random weights, --no-eval, or no "
                    "dataset recorded)")
    return Exported(plan, source, fp32, variants)


def _fp32(plan: BuildPlan, source: Source, opts: ExportOptions, held_out: HeldOut | None) -> Variant:
    """Step 1: the fp32 ONNX: the given one, this checkpoint's earlier export, or a new one."""
    if plan.from_onnx:
        logger.info(f"[export 1/3] source ONNX {plan.fp32} ({source.precision})")
        return Variant(plan.fp32, source.record)
    earlier = source.reusable(plan.fp32, plan.opset, plan.batch, plan.probe, plan.attention,
                              plan.device.name if plan.device else None, plan.pad_to, plan.convention,
                              plan.input_dtype)
    if earlier is not None:
        logger.info(f"[export 1/3] reusing {plan.fp32}: same checkpoint, opset, batch and attention, checked "
                    "against PyTorch when written")
        return Variant(plan.fp32, earlier)
    from .onnx_export import export_onnx

    fused = "" if plan.attention == GROUPED else f", attention fused for ONNX Runtime ({plan.attention})"
    if opts.opset is not None and plan.opset != opts.opset:
        logger.info(f"note: --opset {opts.opset} is the portable graph's; ONNX Runtime's fused attention needs "
                    f"opset {plan.opset}")
    for_device = f", for {plan.device.describe()}" if plan.device and plan.device.name != DEFAULT_DEVICE else ""
    padded = f", heads padded to {plan.pad_to} ({plan.pad_reason})" if plan.pad_to else ""
    padded += (f", takes RGB pixels 0-255 as {plan.input_dtype} (normalisation folded into the patch embedding)"
               if plan.convention == "pixels" else "")
    logger.info(f"[export 1/3] {plan.fp32} (opset {plan.opset}, batch {plan.batch or 'dynamic'}{fused}{for_device}"
                f"{padded}) and its check against PyTorch")
    evaluate = plan.evaluate and "fp32" in plan.precisions  # a variant's own accuracy is what counts
    written = export_onnx(source.model, plan.fp32, source.record.to_json(), opset=opts.opset or DEFAULT_OPSET,
                          batch=plan.batch, probe=plan.probe,
                          measure=lambda tmp, r: measure(tmp, r, None, evaluate, opts.data_root, step=None,
                                                         held_out=held_out),
                          attention=plan.attention, device=plan.device, pad_to=plan.pad_to, pad_reason=plan.pad_reason,
                          convention=plan.convention, input_dtype=plan.input_dtype)
    record = ArtifactRecord.from_json(written)
    logger.info(f"      ONNX Runtime vs PyTorch: max abs logit error {record.parity_max_abs_err:.2e}")
    return Variant(plan.fp32, record)


def run_export(req: ExportRequest, source: Source | None = None) -> list[Path]:
    """`mlit-edge export`: the fp32 export, checked against PyTorch, and the variants asked for beside it
    (TensorRT's flavour); returns their paths. `source`: the request's source when the caller already
    opened it (`mlit_edge.api.Model`). The output folder is made as `build` makes its own
    (`artifacts.outputs.output_folder`, through `export_stage`), and removed again if nothing was written."""
    with shown(req.progress):
        source = source or open_source(req)
        plan = resolve_plan(req, source)
        with export_stage(plan, source, req) as exported:
            return [exported.variants[p].path for p in plan.precisions]


__all__ = ["ExportOptions", "ExportRequest", "Exported", "export_artifacts", "export_stage", "resolve_plan",
           "run_export"]
