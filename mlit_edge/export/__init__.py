"""From a trained model to ONNX files: `to_deploy` (the static-shape graph), the ONNX export with its
parity check, the fp16 and INT8 variants, INT8 calibration, and the TensorRT graph check.

This file holds the stage's constants and imports nothing heavy, so the CLI can read them.
"""
from __future__ import annotations

from dataclasses import dataclass

# the build's choices, read from the one target table the runtime checks sidecars against
from ..artifacts.targets import FRONTENDS, GROUPED, ORT_ATTENTION, PRECISIONS, TARGETS
OPSETS = (18, 19, 20)  # 17 falls back to 18 in the dynamo exporter; 23+ emits an Attention op TensorRT lacks
DEFAULT_OPSET = 18


@dataclass(frozen=True)
class AttentionForm:
    """How a fused attention form (`fused_attention`) is written, and what runs it."""

    op: str  # the ONNX node, as the sidecar records it
    opset: int | None  # the ai.onnx opset the form needs; None: any of OPSETS
    repeat_kv: bool  # K/V heads repeated per query head (multi-head-only kernels)
    onnxruntime: str  # the oldest ONNX Runtime it ran on here (1.22 has no opset 23; 1.23.2 and 1.32 run all three)


ATTENTION_FORMS: dict[str, AttentionForm] = {
    "onnx": AttentionForm("Attention (ai.onnx, opset 23)", 23, False, "1.23"),
    "ms-mha": AttentionForm("MultiHeadAttention (com.microsoft)", None, True, "1.23"),
    "ms-attention": AttentionForm("Attention (com.microsoft)", None, True, "1.23"),
}


def export_opset(attention: str, opset: int) -> int:
    """The opset an export in `attention` form is written at: the form's own where it needs one."""
    form = ATTENTION_FORMS.get(attention)
    return (form.opset if form else None) or opset


__all__ = ["ATTENTION_FORMS", "AttentionForm", "DEFAULT_OPSET", "FRONTENDS", "GROUPED", "OPSETS", "ORT_ATTENTION",
           "PRECISIONS", "TARGETS", "export_opset"]
