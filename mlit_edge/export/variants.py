"""Precision variants of an fp32 export, made one way for `export` and `build` alike.

One function makes a variant (`make_variant`) from the fp32 artifact the run holds (`Variant`: its path,
typed record and parsed graph) and what every variant of the run shares (`Inputs`: the model and the
data, each loaded once): convert or calibrate into a temporary file, measure it there (against the
PyTorch model when there is one, and top-1 on the held-out split), then publish the file and its
sidecar together, written once with everything measured. The flavour (`flavours.FLAVOURS`) says how.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..base.messages import log_lines
from ..base.progress import progress
from ..base.routing import partial_layers
from ..artifacts.schema import ArtifactRecord
from ..artifacts.sidecar import publish, temporary_beside
from ..artifacts.targets import PARSER_GRAPH
from .calibration import (MIN_EXPERT_TOKENS, CalibrationSet, Recipe, calibrate_int8, calibration_set,
                          format_coverage, routing_coverage, write_manifest)
from .flavours import Flavour, artifact_stem, flavour, variant_path
from .handoff import HeldOut, Variant
from ..runtime.runners import OnnxRuntimeRunner
from .counted import predict_counted

logger = logging.getLogger(__name__)

def evaluate_onnx(path: str | Path, held_out: HeldOut, batch: int = 250, content: bytes | None = None) -> dict:
    """Top-1 of an ONNX classifier on a dataset's held-out split (decoded once per command) through ONNX
    Runtime; `content`: the graph's bytes when the caller holds them."""
    with OnnxRuntimeRunner(path, content=content) as run:
        return evaluate_runner(run, held_out, batch)


def evaluate_runner(run, held_out: HeldOut, batch: int = 250, normalisation: tuple | None = None) -> dict:
    """`evaluate_onnx` through an open runner of any kind; `normalisation`: (mean, std), the split's by default."""
    images, _, name = held_out.labelled()
    logits, _ = predict_counted(f"top-1 on {name} test", run, images, batch,
                                normalised=normalisation or split_normalisation(held_out))
    return top1_of(logits, held_out)


def top1_of(logits: np.ndarray, held_out: HeldOut) -> dict:
    """`evaluate_runner`'s figures from logits already computed on the whole split, in its order."""
    labels = held_out.split.labels.numpy()
    correct = int((logits.argmax(-1) == labels).sum())
    return {"dataset": held_out.split.name, "split": "test", "images": int(len(labels)),
            "top1": correct / max(1, len(labels))}


def split_normalisation(held_out: HeldOut) -> tuple:
    """The (mean, std) the split's images were normalised with."""
    return held_out.split.mean, held_out.split.std


def reusable_for_top1(held_out: HeldOut | None, normalisation: tuple | None) -> bool:
    """Whether outputs computed on `held_out.sample()` fed with `normalisation` are the split's as `evaluate_runner`
    feeds it: the sample is the whole split and the images reach the graph the same way."""
    if held_out is None or not held_out.sample_is_split():
        return False
    return normalisation is None or all(list(map(float, a)) == list(map(float, b))
                                        for a, b in zip(normalisation, split_normalisation(held_out)))


def measure(path: Path, record: ArtifactRecord, model=None, evaluate: bool = True, data_root: str | Path = "data",
            step: str | None = "[export 3/3]", held_out: HeldOut | None = None, proto: Any = None) -> dict:
    """What an artifact's sidecar records about how it computes: `parity` against the PyTorch `model`
    for a reduced precision, and `accuracy` on the held-out split of its dataset (from the parity run's logits
    when that run covered the whole split, as it does for splits of up to `HELD_OUT` images).

    `step` prefixes the accuracy line; None measures silently what is not asked (an intermediate file).
    `held_out`: the decoded test split; `proto`: the artifact's graph, when the caller holds it parsed."""
    out = {}
    dataset = record.dataset
    held_out = held_out or (HeldOut(dataset, data_root) if dataset else None)
    logits = None
    if model is not None and record.precision != "fp32":
        from .onnx_export import parity_of, variant_outputs

        images = held_out.sample() if held_out else HeldOut("mnist5k", data_root).sample()
        pre = record.preprocess
        normalisation = (pre.mean, pre.std) if pre else None
        logits, routes = variant_outputs(path, images, proto, normalisation)
        out["parity"] = parity = parity_of(logits, routes, model, images)
        if not reusable_for_top1(held_out, normalisation):
            logits = None
        logger.info(f"      vs PyTorch on {parity['images']} held-out images: top-1 agreement "
                    f"{parity['top1_agreement']:.4f}, max abs logit error {parity['max_abs_err']:.2e}")
        log_lines(logger, routing_report(parity, record.precision))
    if evaluate and dataset and not record.random_weights:
        if logits is not None:  # the parity run was the whole split: its logits are the top-1's, one pass saved
            out["accuracy"] = acc = top1_of(logits, held_out)
        else:
            content = proto.SerializeToString() if proto is not None else None
            out["accuracy"] = acc = evaluate_onnx(path, held_out, content=content)
        logger.info(f"{step or '     '} top-1 on {acc['dataset']} {acc['split']} ({acc['images']} images, "
                    f"ONNX Runtime): {acc['top1']:.4f}")
    elif step is not None:
        why = ("random weights" if record.random_weights else "no dataset recorded" if not dataset else "--no-eval")
        logger.info(f"{step} accuracy skipped ({why})")
    return out


ROUTING_WARN = 0.95  # [ours] below this share of tokens keeping their experts, a layer's routing is fragile


def routing_report(parity: dict, precision: str) -> str:
    """Per layer, how many tokens keep their experts in `precision`, beside the margins that decide them,
    with a warning for layers where reduced precision flips many."""
    agree, margins = parity["routing_agreement"], parity["margin_median"]
    lines = [f"      routing kept in {precision} per layer (share of tokens with the same experts as PyTorch; "
             "median clean margin):"]
    alone = partial_layers(parity.get("routed_tokens"), len(agree))
    lines += [f"        layer {i}: {a:.3f} (margin {m:.3f}){', the dummy token alone' if one else ''}"
              for i, (a, m, one) in enumerate(zip(agree, margins, alone))]
    weak = [i for i, a in enumerate(agree) if a < ROUTING_WARN]
    if weak:
        lines.append(f"      warning: in {precision}, layer(s) {', '.join(map(str, weak))} route more than "
                     f"{100 * (1 - ROUTING_WARN):.0f}% of tokens to other experts: their clean margins are small "
                     "against the rounding error, mostly the INT8 activations' in every layer before them (train with "
                     "--gating annealed, or check accuracy with bench; benchmarks/int8_sensitivity.py measures what "
                     "keeping layers in float buys)")
    return "\n".join(lines)


@dataclass
class Inputs:
    """What every variant of one run shares, each loaded once: the PyTorch model, the data and the settings."""

    model: Any = None  # the PyTorch model to measure parity against (None on a device)
    recipe: Recipe = field(default_factory=Recipe)
    data_root: str | Path = "data"
    cache_dir: str | Path | None = None
    min_expert_tokens: int = MIN_EXPERT_TOKENS
    evaluate: bool = True
    torch: bool = True  # datasets need it: without it (a device) no routing report is made
    held_out: HeldOut | None = None
    _calib: CalibrationSet | None = field(default=None, repr=False)

    def calibration(self) -> CalibrationSet:
        if self._calib is None:
            self._calib = calibration_set(self.recipe, self.data_root)
        return self._calib


def make_variant(src: Variant, flavour: Flavour, inputs: Inputs, final: Path) -> Variant:
    """The variant of the fp32 artifact `src` in `flavour` at `final`, measured and published with its sidecar."""
    from .fp16 import to_fp16

    if flavour.maker not in ("fp16", "int8-qdq", "int8-static"):
        raise ValueError(f"{flavour.tag} is made by the export itself, not as a variant")
    coverage = reused = None
    proto = None
    with temporary_beside(final) as tmp:
        if flavour.maker == "fp16":
            logger.info(f"[export 2/3] fp16 {final} ({flavour.about})")
            with progress("fp16 conversion"):
                info, proto = to_fp16(src.path, tmp, source=src)
        else:  # INT8, calibrated either way: TensorRT's Q/DQ or ONNX Runtime's static integer graph
            recipe = inputs.recipe
            logger.info(f"[export 2/3] {flavour.tag} ({flavour.about}): calibration set of {recipe.n} images, "
                        f"stratified, from {recipe.dataset} {recipe.split} (seed {recipe.seed})")
            calib = inputs.calibration()
            manifest = write_manifest(calib.manifest,
                                      final.with_name(f"{artifact_stem(final)}-{flavour.tag}.calib.json"))
            coverage = routing_coverage(src.path, calib.images, min_tokens=inputs.min_expert_tokens,
                                        available=calib.manifest["split_size"], proto=src.graph(),
                                        normalisation=calib.normalisation)
            log_lines(logger, format_coverage(coverage))
            info, reused, proto = calibrate_int8(src.path, tmp, calib, inputs.cache_dir, coverage, source=src,
                                                 flavour=flavour)
            logger.info(f"      {final}: " + ("reused the cached calibration (same model and data)" if reused else
                                            f"calibrated; manifest {manifest.name}"))
            drift = info.get("quantization", {}).get("batch_drift")
            if drift:
                logger.info(f"      logits of {drift['images']} images one at a time vs in one batch: max abs "
                            f"difference {drift['max_abs_logit']:.1e}")
            line = recipe_line(info)
            if line:
                logger.info(f"      {line}")
        info.update(measure(tmp, ArtifactRecord.from_json(info), inputs.model, inputs.evaluate, inputs.data_root,
                            held_out=inputs.held_out, proto=proto))
        record = ArtifactRecord.from_json(publish(tmp, final, info))
    return Variant(final, record, coverage, reused, proto)


def recipe_line(info: dict) -> str:
    """What an INT8 variant's recipe kept in float and did first, from its sidecar fields (TensorRT's keep it
    under `calibration`, int8-ort's under `quantization`); "" where they say nothing of it."""
    kept = next((b for b in (info.get("quantization", {}), info.get("calibration", {})) if "float" in b), None)
    if kept is None:
        return ""
    smooth, rounded = kept.get("smoothing"), kept.get("rounded")
    return (f"in float: {', '.join(kept['float'])}; {kept['int8_mac_share']:.0%} of the matmul MACs in int8, "
            f"{kept['ranges']} ranges" + (f"; smoothed first (a={smooth['alpha']}, exact: max logit change "
                                           f"{smooth['max_abs_logit_change']:.1e})" if smooth else "")
            + (f"; weights GPTQ-rounded ({rounded['matmuls']} matmuls, output error "
               f"{rounded['output_error'] / max(rounded['output_error_nearest'], 1e-30):.2f}x nearest's)"
               if rounded else ""))


def variant_of(src: str | Path, precision: str, inputs: Inputs | None = None, runtime: str = PARSER_GRAPH,
               folder: str | Path | None = None) -> Variant:
    """`make_variant` for an fp32 export on disk (a script or a test; the pipeline holds its artifacts): the
    flavour of (`precision`, `runtime`), named beside `src` or in `folder`."""
    return make_variant(Variant.read(src), flavour(precision, runtime), inputs or Inputs(),
                        variant_path(src, precision, folder, runtime))
