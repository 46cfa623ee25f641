"""TensorRT plans: the builder (strongly typed, precision from the ONNX), the torch-tensorrt
frontend, and `run_build`, the whole `mlit-edge build`. TensorRT is imported lazily."""

from ..export import FRONTENDS, TARGETS  # the build's choices live with its request (export.requests)

__all__ = ["FRONTENDS", "TARGETS"]
