"""Precision variants of an fp32 export, made one way for `export` and `build` alike.

One naming rule (`variant_path`), one function that makes a variant (`make_variant`): convert or
calibrate into a temporary file, measure it there (against the PyTorch model when there is one, and
top-1 on the held-out split), then publish the file and its sidecar together, written once with
everything measured.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

from ..runtime.artifact import torch_available
from ..runtime.runners import partial_layers
from ..runtime.sidecar import publish, temporary_beside
from .names import artifact_stem, variant_path
from .calibration import (MIN_EXPERT_TOKENS, Recipe, calibrate_int8, calibration_set, format_coverage,
                          routing_coverage, write_manifest)

logger = logging.getLogger(__name__)

HELD_OUT = 1000  # images of the test split a variant is compared with PyTorch on


def evaluate_onnx(path: str | Path, dataset: str, split: str = "test", data_root: str | Path = "data",
                  batch: int = 250) -> dict:
    """Top-1 of an ONNX classifier on a dataset split through ONNX Runtime (eval preprocessing)."""
    from ..runtime.runners import OnnxRuntimeRunner, predict_all
    from ..train.data import load_dataset

    ds = load_dataset(dataset, split, data_root)
    labels = ds.labels.numpy()
    with OnnxRuntimeRunner(path) as run:
        logits, _ = predict_all(run, ds.inputs(), batch)
    correct = int((logits.argmax(-1) == labels).sum())
    return {"dataset": ds.name, "split": split, "images": int(len(labels)), "top1": correct / max(1, len(labels))}


def measure(path: Path, record: dict, model=None, evaluate: bool = True, data_root: str | Path = "data",
            step: str | None = "[export 3/3]") -> dict:
    """What an artifact's sidecar records about how it computes: `parity` against the PyTorch `model`
    for a reduced precision, and `accuracy` on the held-out split of its dataset.

    `step` prefixes the accuracy line; None measures silently what is not asked (an intermediate file)."""
    out = {}
    dataset = (record.get("preprocess") or {}).get("dataset")
    if model is not None and record.get("precision") != "fp32":
        from ..train.data import sample_images
        from .onnx_export import variant_parity

        held_out, _ = sample_images(dataset or "mnist5k", "test", HELD_OUT, data_root)
        out["parity"] = parity = variant_parity(path, model, held_out)
        logger.info(f"      vs PyTorch on {parity['images']} held-out images: top-1 agreement "
                    f"{parity['top1_agreement']:.4f}, max abs logit error {parity['max_abs_err']:.2e}")
        logger.info(routing_report(parity, record["precision"]))
    if evaluate and dataset and not record.get("random_weights"):
        out["accuracy"] = acc = evaluate_onnx(path, dataset, "test", data_root)
        logger.info(f"{step or '     '} top-1 on {acc['dataset']} {acc['split']} ({acc['images']} images, "
                    f"ONNX Runtime): {acc['top1']:.4f}")
    elif step is not None:
        why = ("random weights" if record.get("random_weights") else "no dataset recorded" if not dataset else
               "--no-eval")
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
                     "against the rounding error (train with --gating annealed, or check accuracy with bench)")
    return "\n".join(lines)


@dataclass
class Variant:
    path: Path
    record: dict
    coverage: dict | None = None  # INT8: tokens per expert per layer on the calibration set
    calibration_reused: bool | None = None


def make_variant(src: str | Path, precision: str, model=None, recipe: Recipe | None = None,
                 data_root: str | Path = "data", cache_dir: str | Path | None = None,
                 min_expert_tokens: int = MIN_EXPERT_TOKENS, evaluate: bool = True, folder: str | Path | None = None,
                 runtime: str = "tensorrt") -> Variant:
    """The fp16 or INT8 variant of the fp32 ONNX `src` (`variant_path`: beside it, or in `folder`), measured
    and published with its sidecar. `model`: the PyTorch model to measure parity against (None on a device).
    `runtime`: INT8 for "tensorrt" is QDQ in TensorRT's recipe; for "onnxruntime" it is the graph ONNX
    Runtime's CPU kernels run fastest (`precision.to_int8_dynamic`)."""
    from .precision import to_fp16, to_int8_dynamic

    if precision not in ("fp16", "int8"):
        raise ValueError(f"a variant is fp16 or int8, not {precision!r}")
    src, final = Path(src), variant_path(src, precision, folder, runtime)
    coverage = reused = None
    with temporary_beside(final) as tmp:
        if precision == "fp16":
            logger.info(f"[export 2/3] fp16 {final} (LayerNorm, softmax, router and head stay fp32)")
            record = to_fp16(src, tmp)
        elif runtime == "onnxruntime":
            recipe = recipe or Recipe()
            logger.info(f"[export 2/3] int8 for ONNX Runtime {final}: int8 per-channel weights, activations "
                        "quantized per call (no calibration set needed)")
            if torch_available():  # the routing report reads a dataset; a device without torch skips it
                # no minimum: nothing is calibrated (each call's activations are quantized from their own range),
                # and the fused graph routes only the dummy token in its last layer
                coverage = routing_coverage(src, calibration_set(recipe, data_root).images, min_tokens=0)
                logger.info(format_coverage(coverage))
            record = to_int8_dynamic(src, tmp, coverage)
        else:
            recipe = recipe or Recipe()
            logger.info(f"[export 2/3] int8: calibration set of {recipe.n} images, stratified, from {recipe.dataset} "
                        f"{recipe.split} (seed {recipe.seed})")
            calib = calibration_set(recipe, data_root)
            manifest = write_manifest(calib.manifest, final.with_name(f"{artifact_stem(final)}-int8.calib.json"))
            coverage = routing_coverage(src, calib.images, min_tokens=min_expert_tokens,
                                        available=calib.manifest["split_size"])
            logger.info(format_coverage(coverage))
            record, reused = calibrate_int8(src, tmp, calib, cache_dir, coverage)
            logger.info(f"      QDQ {final}: " + ("reused the cached calibration (same model and data)" if reused else
                                          f"calibrated; manifest {manifest.name}"))
        record.update(measure(tmp, record, model, evaluate, data_root))
        record = publish(tmp, final, record)
    return Variant(final, record, coverage, reused)
