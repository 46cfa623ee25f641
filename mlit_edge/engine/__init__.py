"""TensorRT plans: the builder (strongly typed, precision from the ONNX), the torch-tensorrt
frontend, and `run_build`, the whole `mlit-edge build`. TensorRT is imported lazily."""

TARGETS = ("auto", "tensorrt", "tensorrt-rtx", "onnxruntime")  # where a build's artifact will run
FRONTENDS = ("onnx", "torch-tensorrt")
