"""Whether the program a `.plan` is handed to can deserialize it, read from the plan's sidecar before anything
is written (`export-deepstream`, `export-triton`); an ONNX is always accepted (the consumer builds it).

- A TensorRT-RTX plan is refused by both: TensorRT-RTX engines are deserialized by TensorRT-RTX's own
  runtime (`runtime.trt_env.deserialize` opens a plan with the module that built it), and neither consumer
  links it: DeepStream's nvinfer links libnvinfer (DeepStream 6.2, sources/libs/nvdsinfer/Makefile:
  `-lnvinfer -lnvinfer_plugin -lnvonnxparser`), Triton's TensorRT backend too
  (triton-inference-server/tensorrt_backend CMakeLists.txt, commit 01ec6ba: `find_library(NVINFER_LIBRARY NAMES
  nvinfer)`).
- DeepStream here means a Jetson (the project's target): a plan built anywhere else (x86, no Jetson module) is
  refused, since an engine runs only on the GPU and TensorRT it was built with (`trt_env.check_compatible`).
  Triton runs on x86 and on Jetsons alike, so export-triton leaves the platform to `mlit-edge serve`-style
  checks on the device.
The refusal is one line with the command to run on the device.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

from .schema import ArtifactRecord
from .trt_env import MODULES

CONSUMERS = {"deepstream": "DeepStream's nvinfer", "triton": "Triton's TensorRT backend"}
JETSON_PLATFORM = "Linux aarch64"  # platform.system() and machine() on a Jetson, as trt_env.local_env records them


def build_command(record: Mapping[str, Any], consumer: str = "triton") -> str:
    """The build to run on the device for a plan the consumer can load: from the plan's source ONNX, or for
    DeepStream from the probabilities copy export-deepstream makes of it (nvinfer reads probabilities)."""
    onnx = str(record.get("source_onnx") or "X.onnx")
    if consumer == "deepstream" and not onnx.endswith("-probabilities.onnx"):
        onnx = f"{onnx[:-len('.onnx')] if onnx.endswith('.onnx') else onnx}-probabilities.onnx"
    return f"mlit-edge build --onnx {onnx} --target tensorrt --precision {record.get('precision', 'fp16')}"


def _fix(record: Mapping[str, Any], consumer: str) -> str:
    if consumer != "deepstream":
        return f"on the device run {build_command(record)}"
    return (f"pass the ONNX ({record.get('source_onnx') or 'X.onnx'}) to export-deepstream instead (nvinfer builds "
            "and caches the engine itself), or build the plan on the Jetson from the copy export-deepstream writes: "
            f"{build_command(record, consumer)}")


def check_plan_consumer(record: Mapping[str, Any], path: str | Path, consumer: str) -> None:
    """ValueError (one line, with the build command) unless `consumer` ("deepstream" or "triton") can load the
    plan `path` whose sidecar is `record`."""
    if consumer not in CONSUMERS:
        raise ValueError(f"unknown consumer {consumer!r}: one of {', '.join(CONSUMERS)}")
    name, rec = Path(path).name, ArtifactRecord.of(record)
    if record.get("target") == "tensorrt-rtx" or rec.builder_module == MODULES["tensorrt-rtx"]:
        raise ValueError(f"{name} is a TensorRT-RTX plan, and {CONSUMERS[consumer]} loads TensorRT plans only; "
                         f"{_fix(record, consumer)}")
    if consumer != "deepstream":
        return
    platform, module = rec.device.get("platform"), rec.device.get("module") or rec.device.get("l4t")
    if platform != JETSON_PLATFORM or not module:
        built = f"on {platform}" if platform else "on a platform its sidecar does not record"
        raise ValueError(f"{name} was built {built}{'' if module else ', not on a Jetson'}, and DeepStream on a "
                         f"Jetson needs an engine built there: {_fix(record, consumer)}")


__all__ = ["CONSUMERS", "JETSON_PLATFORM", "build_command", "check_plan_consumer"]
