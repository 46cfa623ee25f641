"""The one naming rule of every artifact: STEM-PRECISION[-FLAVOUR].SUFFIX."""
from __future__ import annotations

from pathlib import Path

from . import PRECISIONS

# precisions made differently for one runtime: ONNX Runtime's fp32 has its fused attention kernels, and its
# INT8 (made from that fp32) integer matmuls for its CPU kernels
FLAVOURS = {("fp32", "onnxruntime"): "fp32-ort", ("int8", "onnxruntime"): "int8-ort"}


def artifact_stem(path: str | Path) -> str:
    """The model's name without format and precision: mlit-xxs-fp16.onnx -> mlit-xxs."""
    name = Path(path).name.removesuffix(".onnx")
    for tag in (*FLAVOURS.values(), *PRECISIONS):
        name = name.removesuffix(f"-{tag}")
    return name


def artifact_name(stem: str, precision: str, suffix: str = ".onnx", runtime: str = "any") -> str:
    """The one naming rule of every artifact: STEM-PRECISION[-FLAVOUR].SUFFIX, e.g. mlit-xxs-int8.plan,
    or mlit-xxs-int8-ort.onnx for the INT8 graph made for ONNX Runtime's CPU kernels."""
    return f"{stem}-{FLAVOURS.get((precision, runtime), precision)}{suffix}"


def variant_path(src: str | Path, precision: str, folder: str | Path | None = None, runtime: str = "any") -> Path:
    """Where the `precision` variant of `src` goes, beside it unless `folder` is given:
    mlit-xxs-fp32.onnx -> mlit-xxs-int8.onnx, model.onnx -> model-int8.onnx."""
    src = Path(src)
    return Path(folder or src.parent) / artifact_name(artifact_stem(src), precision, runtime=runtime)
