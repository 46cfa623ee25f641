"""The artifact formats by name and their file suffixes: the only place a suffix says what a file is.

The runtime adds each format's opener (`runtime.artifact`); the output checks (`artifacts.outputs`) read the
suffixes to tell an artifact from any other file.
"""
from __future__ import annotations

SUFFIXES = {
    "tensorrt": (".plan", ".engine", ".trt"),
    "onnxruntime": (".onnx",),
    "torch": (".pt", ".pth", ".safetensors"),  # .safetensors: train.weights_file
}
