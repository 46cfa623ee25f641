"""DLA builds (Jetson AGX/NX Orin and Xavier): what `--dla-core` accepts, and which layers really run there.

The rules, from NVIDIA's own answers, live here once:
- the DLA runs FP16 and INT8 only, on static shapes (TensorRT developer guide, "Working with DLA"; the
  builder's `max_DLA_batch_size` and `DLA_core` in NVIDIA/TensorRT release/8.5-10.13
  python/src/infer/pyCore.cpp), so `--dla-core` needs `--batch` and a reduced precision;
- its INT8 is implicitly quantized: calibrated, not Q/DQ. A QAT/Q-DQ graph does not run on it ("Currently,
  DLA doesn't support QAT yet", NVIDIA/TensorRT#2222; "DLA only supports IInt8EntropyCalibrator2 in PTQ",
  ibid.; NVIDIA-AI-IOT/jetson_dla_tutorial#3), so a Q/DQ ONNX is refused with `--dla-core`, and
  `--precision int8` builds a calibrated engine from the fp32 graph where the calibrator exists (dla_int8.py).
  The first quote is NVIDIA's (zerollzeng, TensorRT team, in #2222); the second is the issue's reporter's
  (WeixiangXu), a user's reading. NVIDIA's own word on the calibrator is the developer guide's "IEntropyCalibratorV2
  ... is required for DLA as it supports per activation tensor scaling" (TensorRT 6.0.1 guide, INT8 calibration);
- which layers the DLA takes is TensorRT's own answer, `IBuilderConfig.can_run_on_DLA(layer)` (pyCore.cpp,
  every release above); the others fall back to the GPU with BuilderFlag.GPU_FALLBACK, and the sidecar
  records them and their count as the *requested* placement (the builder's own later splits are the built
  engine's to report). The built engine does not say it in a form read here: its inspector shows a DLA
  subgraph as one `{ForeignNode[first...last]}` layer, the name Myelin's GPU subgraphs also take, and NVIDIA's
  answer is "DLA layer information is in the verbose log" (zerollzeng, NVIDIA/TensorRT#3143). Off a TensorRT
  with DLA (TensorRT-RTX has none) none of it is measurable.
"""
from __future__ import annotations

from collections import Counter
from pathlib import Path

from types import ModuleType
from typing import TYPE_CHECKING

from ..artifacts.targets import DLA, TABLE
from .dla_int8 import holds_qdq, implicit_int8_refusal

if TYPE_CHECKING:
    import tensorrt as trt

DLA_PRECISIONS = ("fp16", "int8")  # int8: implicitly quantized from the fp32 graph (engine/dla_int8.py)
NOT_MEASURABLE = ("DLA placement not measurable here: {module} has no DLA core (which layers fall back to the GPU "
                  "is TensorRT's answer on a Jetson with a DLA: mlit-edge build --dla-core N --batch B there)")
QDQ_REFUSED = ("--dla-core with --precision int8: {onnx} is a Q/DQ graph, which the DLA does not run "
               "(NVIDIA/TensorRT#2222); pass the fp32 ONNX (calibrated for the DLA) or build with --precision fp16")


def check_dla_request(dla_core: int | None, precision: str, batch: int | None, target: str | None = None) -> None:
    """A one-line ValueError for a `--dla-core` build the DLA cannot run; nothing without `--dla-core`.
    `target`: the resolved build target, when known (only TensorRT places layers on a DLA)."""
    if dla_core is None:
        return
    # int8: check_dla_int8 says why; TensorRT-RTX builds, then says the DLA placement is not measurable (no DLA)
    if target is not None and TABLE[target].builder is None and precision != "int8":
        raise ValueError(f"--dla-core builds a TensorRT engine for a Jetson's DLA: use --target {' or '.join(DLA)}, "
                         f"not {target}")
    if precision not in DLA_PRECISIONS:
        raise ValueError(f"--dla-core with --precision {precision}: the DLA runs FP16 and INT8 only; "
                         "use --precision fp16")
    if batch is None:
        raise ValueError("--dla-core needs a static batch (the DLA takes static shapes only): add --batch N")


def check_dla_int8(target: str, module: ModuleType | None, onnx: str | None, frontend: str = "onnx") -> None:
    """A one-line ValueError for `--dla-core --precision int8` where implicit quantization does not exist
    (TensorRT-RTX, a release without the calibrator) or from a Q/DQ ONNX (engine/dla_int8.py). `module`: the
    imported TensorRT, None when called before the import (refusing TensorRT-RTX without needing it)."""
    if onnx is not None and Path(onnx).is_file() and holds_qdq(onnx):  # first: the graph's fault, on any target
        raise ValueError(QDQ_REFUSED.format(onnx=onnx))
    why = implicit_int8_refusal(target, module, frontend)
    if why:
        raise ValueError(why)


def configure_dla(builder: trt.Builder, config: trt.IBuilderConfig, network: trt.INetworkDefinition,
                  module: ModuleType, core: int) -> dict:
    """Put the network on DLA core `core` with GPU fallback; returns the sidecar's DLA record: the layers
    TensorRT says the DLA cannot take (`can_run_on_DLA`), by name and type, and how many fell back."""
    if not TYPE_CHECKING:
        trt = module
    cores = builder.num_DLA_cores
    if cores == 0:  # TensorRT-RTX and every discrete GPU: nothing to place, nothing to measure
        raise RuntimeError(NOT_MEASURABLE.format(module=f"{trt.__name__} {trt.__version__}"))
    if core >= cores:
        raise RuntimeError(f"--dla-core {core}: this platform has {cores} DLA core(s) "
                           "(DLA exists on Jetson AGX/NX Orin and Xavier)")
    config.default_device_type = trt.DeviceType.DLA
    config.DLA_core = core
    config.set_flag(trt.BuilderFlag.GPU_FALLBACK)
    return {"dla_core": core, "gpu_fallback": True}


def dla_placement(config: trt.IBuilderConfig, network: trt.INetworkDefinition, module: ModuleType) -> dict:
    """The placement the build *requests*, read once every layer's device is set (after the fp32 pins moved to
    the GPU: dla_int8.pinned_to_gpu): a layer is requested on the DLA when its device type is DLA and TensorRT's
    `can_run_on_DLA` takes it; the others fall back to the GPU. The builder may still split further (a DLA
    subgraph it cannot form, a DLA loadable limit), which only the built engine knows: the record says
    "requested", never "placed"."""
    if not TYPE_CHECKING:
        trt = module
    gpu: list[dict] = []
    for i in range(network.num_layers):
        layer = network.get_layer(i)
        if config.get_device_type(layer) != trt.DeviceType.DLA or not config.can_run_on_DLA(layer):
            gpu.append({"name": layer.name, "type": str(layer.type).rsplit(".", 1)[-1]})
    return {"basis": "requested", "dla_layers": network.num_layers - len(gpu), "gpu_fallback_layers": len(gpu),
            "gpu_layers": gpu}


def format_placement(placement: dict) -> str:
    """The build-time lines of the builder's DLA placement (the engine flags' `dla`, not a sidecar): how many
    layers run on the DLA, and the ones that fall back, by type."""
    kinds = Counter(g["type"] for g in placement["gpu_layers"])
    fallback = ", ".join(f"{t} x{n}" for t, n in kinds.most_common()) or "none"
    pinned = placement.get("fp32_gpu_layers") or []
    return (f"DLA core {placement['dla_core']} (requested; the builder may split further): {placement['dla_layers']} "
            f"layers on the DLA, {placement['gpu_fallback_layers']} on the GPU ({fallback})"
            + (f", {len(pinned)} of them fp32-pinned" if pinned else ""))
