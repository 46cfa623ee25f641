"""The one table of what each precision is for each runtime, and the one naming rule of every artifact.

A flavour is one (precision, runtime) pair: how its artifact is made (`maker`), the attention form of the
fp32 export it is made from, and the tag in its file name (STEM-TAG.SUFFIX). Export, build and the names
all read this table, as Ultralytics keeps its export formats in one table; nothing else branches on the
pair.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..base.compat import removesuffix
from . import GROUPED, ORT_ATTENTION, PRECISIONS

RUNTIMES = ("tensorrt", "onnxruntime")  # what a build's artifact runs on


@dataclass(frozen=True)
class Flavour:
    """How one precision is made for one runtime."""

    precision: str
    runtime: str
    tag: str  # in the file name: mlit-xxs-TAG.onnx
    attention: str  # the fp32 export it starts from: the portable graph, or ONNX Runtime's fused one
    maker: str  # "export" (the fp32 graph itself), "fp16" casts, "int8-qdq" (TensorRT's recipe), "int8-dynamic"
    about: str  # one line for the progress log


FLAVOURS: dict[tuple[str, str], Flavour] = {(f.precision, f.runtime): f for f in (
    Flavour("fp32", "tensorrt", "fp32", GROUPED, "export", "the portable graph (TensorRT, any runtime)"),
    Flavour("fp16", "tensorrt", "fp16", GROUPED, "fp16", "LayerNorm, softmax, router and head stay fp32"),
    Flavour("int8", "tensorrt", "int8", GROUPED, "int8-qdq", "Q/DQ in TensorRT's recipe, calibrated"),
    Flavour("fp32", "onnxruntime", "fp32-ort", ORT_ATTENTION, "export", "ONNX Runtime's fused attention kernel"),
    # fp16 is a GPU format: on ONNX Runtime's CPU it runs through Casts, so it stays the portable graph
    Flavour("fp16", "onnxruntime", "fp16", GROUPED, "fp16", "LayerNorm, softmax, router and head stay fp32"),
    Flavour("int8", "onnxruntime", "int8-ort", ORT_ATTENTION, "int8-dynamic",
            "int8 per-channel weights, activations quantized per call (no calibration set needed)"),
)}


def flavour(precision: str, runtime: str) -> Flavour:
    """The flavour of `precision` for `runtime`; a one-line error for a pair the table lacks."""
    try:
        return FLAVOURS[(precision, runtime)]
    except KeyError:
        raise ValueError(f"no {precision} artifact for {runtime}: choose a precision from {', '.join(PRECISIONS)} "
                         f"and a runtime from {', '.join(RUNTIMES)}") from None


def fp32_base(f: Flavour) -> Flavour:
    """The fp32 export a flavour is made from: its runtime's own fp32 where the attention forms agree (ONNX
    Runtime's INT8 starts from its fused graph), else the portable graph (ONNX Runtime's fp16)."""
    own = FLAVOURS[("fp32", f.runtime)]
    return own if own.attention == f.attention else FLAVOURS[("fp32", "tensorrt")]


def artifact_stem(path: str | Path) -> str:
    """The model's name without format and precision: mlit-xxs-fp16.onnx -> mlit-xxs."""
    name = removesuffix(Path(path).name, ".onnx")
    for tag in sorted({f.tag for f in FLAVOURS.values()} | set(PRECISIONS), key=len, reverse=True):
        name = removesuffix(name, f"-{tag}")
    return name


def artifact_name(stem: str, precision: str, suffix: str = ".onnx", runtime: str = "tensorrt") -> str:
    """The one naming rule of every artifact: STEM-TAG.SUFFIX, e.g. mlit-xxs-int8.plan, or
    mlit-xxs-int8-ort.onnx for the INT8 graph made for ONNX Runtime's CPU kernels."""
    return f"{stem}-{flavour(precision, runtime).tag}{suffix}"


def variant_path(src: str | Path, precision: str, folder: str | Path | None = None,
                 runtime: str = "tensorrt") -> Path:
    """Where the `precision` variant of `src` goes, beside it unless `folder` is given:
    mlit-xxs-fp32.onnx -> mlit-xxs-int8.onnx, model.onnx -> model-int8.onnx."""
    src = Path(src)
    return Path(folder or src.parent) / artifact_name(artifact_stem(src), precision, runtime=runtime)
