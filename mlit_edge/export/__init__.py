"""From a trained model to ONNX files: `to_deploy` (the static-shape graph), the ONNX export with its
parity check, the fp16 and INT8 variants, INT8 calibration, and the TensorRT graph check.

This file holds the stage's constants and imports nothing heavy, so the CLI can read them.
"""
from ..runtime.schema import PRECISIONS  # the runtime checks sidecars against the same list

OPSETS = (18, 19, 20)  # 17 falls back to 18 in the dynamo exporter; 23+ emits an Attention op TensorRT lacks
DEFAULT_OPSET = 18

__all__ = ["DEFAULT_OPSET", "OPSETS", "PRECISIONS"]
