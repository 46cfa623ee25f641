"""The flavours of artifacts.targets.FLAVOURS (what each precision is for each graph) looked up, and the one
naming rule of every artifact.

A flavour is one (precision, runtime) pair, the runtime being a graph a target consumes: how its artifact is made
(`maker`), the attention form of the fp32 export it is made from, and the tag in its file name (STEM-TAG.SUFFIX).
Export, build and the names all read the table, as Ultralytics keeps its export formats in one table; nothing
else branches on the pair.
"""
from __future__ import annotations

from pathlib import Path

from ..artifacts.targets import FLAVOURS, GRAPHS, PARSER_GRAPH, Flavour
from ..base.compat import removesuffix
from . import PRECISIONS


def flavour(precision: str, runtime: str) -> Flavour:
    """The flavour of `precision` for `runtime`; a one-line error for a pair the table lacks."""
    try:
        return FLAVOURS[(precision, runtime)]
    except KeyError:
        raise ValueError(f"no {precision} artifact for {runtime}: choose a precision from {', '.join(PRECISIONS)} "
                         f"and a runtime from {', '.join(GRAPHS)}") from None


def fp32_base(f: Flavour) -> Flavour:
    """The fp32 export a flavour is made from: its runtime's own fp32 where the attention forms agree (ONNX
    Runtime's INT8 starts from its fused graph), else the portable graph (ONNX Runtime's fp16)."""
    own = FLAVOURS[("fp32", f.runtime)]
    return own if own.attention == f.attention else FLAVOURS[("fp32", PARSER_GRAPH)]


def artifact_stem(path: str | Path) -> str:
    """The model's name without format and precision: mlit-xxs-fp16.onnx -> mlit-xxs."""
    name = removesuffix(Path(path).name, ".onnx")
    for tag in sorted({f.tag for f in FLAVOURS.values()} | set(PRECISIONS), key=len, reverse=True):
        name = removesuffix(name, f"-{tag}")
    return name


def artifact_name(stem: str, precision: str, suffix: str = ".onnx", runtime: str = PARSER_GRAPH) -> str:
    """The one naming rule of every artifact: STEM-TAG.SUFFIX, e.g. mlit-xxs-int8.plan, or
    mlit-xxs-int8-ort.onnx for the INT8 graph made for ONNX Runtime's CPU kernels."""
    return f"{stem}-{flavour(precision, runtime).tag}{suffix}"


def variant_path(src: str | Path, precision: str, folder: str | Path | None = None,
                 runtime: str = PARSER_GRAPH) -> Path:
    """Where the `precision` variant of `src` goes, beside it unless `folder` is given:
    mlit-xxs-fp32.onnx -> mlit-xxs-int8.onnx, model.onnx -> model-int8.onnx."""
    src = Path(src)
    return Path(folder or src.parent) / artifact_name(artifact_stem(src), precision, runtime=runtime)
