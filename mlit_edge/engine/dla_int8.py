"""INT8 on the DLA: an implicitly quantized (calibrated) engine from the fp32 ONNX, fed from the QDQ recipe's images.

The DLA does not run a Q/DQ graph ("Currently, DLA doesn't support QAT yet", NVIDIA/TensorRT#2222) and takes
INT8 only through post-training calibration: "IEntropyCalibratorV2 ... is required for DLA as it supports per
activation tensor scaling" (TensorRT 6.0.1 developer guide, INT8 calibration; the "DLA only supports
IInt8EntropyCalibrator2 in PTQ" often quoted from #2222 is its reporter's words, not NVIDIA's). So:
- the network is parsed from the fp32 (portable) ONNX, weakly typed (no STRONGLY_TYPED), and the builder gets
  INT8 plus FP16: DLA support "is currently limited to networks running in FP16 and INT8 mode" (TensorRT
  developer guide, "Running on DLA during TensorRT Inference"), so a layer without an INT8 DLA kernel has only
  FP16 there; INT8 alone would send it to the GPU in fp32. NVIDIA's own INT8 path sets both flags the same
  way (NVIDIA/TRTorch 26709cc, "Enable FP16 kernels for INT8 applications");
- the calibrator is `IInt8EntropyCalibrator2`, which NVIDIA's bindings define in release/8.5 through 10.16
  (python/src/infer/pyInt8.cpp; engine/data/trt_python_api.json) with `IBuilderConfig.int8_calibrator`
  "Deprecated in TensorRT 10.1. Superseded by explicit quantization." (pyCore.cpp 10.3-10.16). A module
  without it (TensorRT-RTX, a release that drops it) has no implicit quantization: refused, fp16 named;
- the layers a weakly typed build pins to fp32 (router, head, LayerNorm, softmax: plan.pin_fp32) cannot stay
  fp32 on the DLA, which runs FP16 and INT8 only; pinning there means running them on the GPU in fp32
  (`IBuilderConfig.set_device_type(layer, DeviceType.GPU)`, pyCore.cpp 8.5-10.16), so the sidecar lists them
  as GPU layers and the transitions they cost are TensorRT's to time, not hidden;
- the calibration images are the QDQ recipe's manifest (export/calibration.py), same indices and
  preprocessing, so both INT8 flavours rest on one data set; the TensorRT cache sits beside the plan, named by
  the manifest's and the ONNX's sha256, so a changed model or data set never reads a stale one.
"""
from __future__ import annotations

import hashlib
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any, Callable, List, Optional

import numpy as np

from ..artifacts.sidecar import atomic_path
from ..artifacts.targets import DLA, TABLE, of_module
from ..runtime.trt_runner import cuda_check, get_cudart

if TYPE_CHECKING:
    import tensorrt as trt

CALIBRATOR = "IInt8EntropyCalibrator2"


def implicit_int8_refusal(target: str, module: Optional[ModuleType], frontend: str = "onnx") -> Optional[str]:
    """Why `target` (with its imported `module`, None before the import) cannot build a calibrated INT8
    engine, in one line; None when it can."""
    row, built_by = TABLE[target], of_module(module.__name__) if module is not None else None
    plan_maker = built_by or row
    if plan_maker.builder is not None and not plan_maker.implicit_int8:
        return (f"--dla-core with --precision int8: {plan_maker.title} has no implicit quantization (no {CALIBRATOR}, "
                "no DLA); build --dla-core with --precision fp16")
    if not row.dla:
        return f"--dla-core builds a TensorRT engine for a Jetson's DLA: use --target {' or '.join(DLA)}, not {target}"
    if frontend != "onnx":  # the calibrator is TensorRT's builder's, fed through its ONNX parser's network
        return "--dla-core with --precision int8 builds through TensorRT's ONNX parser: drop --frontend " + frontend
    if module is not None and not hasattr(module, CALIBRATOR):
        return (f"--dla-core with --precision int8: {module.__name__} {getattr(module, '__version__', '?')} has no "
                f"{CALIBRATOR} (implicit quantization, the only INT8 the DLA takes, is gone from this release); "
                "build --dla-core with --precision fp16")
    return None


def holds_qdq(onnx_path: str | Path) -> bool:
    """Whether the ONNX holds QuantizeLinear nodes: op types are stored as plain strings in the protobuf, so a
    byte scan answers without the onnx package (the device-side flow has none)."""
    return b"QuantizeLinear" in Path(onnx_path).read_bytes()


def cache_path(plan: str | Path, manifest_sha256: str, onnx_sha256: str) -> Path:
    """The calibration cache beside `plan`, named by both hashes: another model or data set names another file."""
    key = hashlib.sha256(f"{manifest_sha256}|{onnx_sha256}".encode()).hexdigest()[:24]
    plan = Path(plan)
    return plan.with_name(f"{plan.name}.{key}.calib")


def calibration_batches(images: np.ndarray, batch: int) -> List[np.ndarray]:
    """The images in manifest order, in whole static batches (the engine's input shape) and in the graph
    input's own type (`CalibrationSet.for_graph`: float32, or uint8 for a `--input-dtype uint8` graph); a
    remainder that does not fill a batch is left out, since TensorRT reads exactly batch x C x H x W elements
    of the binding's type per call (IInt8Calibrator::getBatch, NvInfer.h)."""
    whole = len(images) - len(images) % batch
    if whole == 0:
        raise ValueError(f"{len(images)} calibration images do not fill one batch of {batch}: "
                         "raise --calib-n or lower --batch")
    return [np.ascontiguousarray(images[i:i + batch]) for i in range(0, whole, batch)]


def make_calibrator(module: ModuleType, images: np.ndarray, batch: int, cache: Path,
                    cudart: Any = None) -> Any:
    """An `IInt8EntropyCalibrator2` of the installed `module`, defined here so importing this file needs no
    TensorRT. It owns one device buffer of the static batch; `cudart`: cuda-python's runtime (the TensorRT
    runner's, runtime/trt_runner.py), injectable for tests."""
    base = getattr(module, CALIBRATOR)
    batches = calibration_batches(images, batch)
    rt = cudart if cudart is not None else get_cudart()

    class EntropyCalibrator(base):  # type: ignore[misc, valid-type]
        """Hands TensorRT the batches in order, then None; reads and writes the keyed cache."""

        def __init__(self) -> None:
            base.__init__(self)  # pybind11 trampolines need the base's own __init__ (TensorRT's samples do so)
            self.position, self.written = 0, False
            self.nbytes = batches[0].nbytes
            self.device = cuda_check(rt.cudaMalloc(self.nbytes))

        def get_batch_size(self) -> int:
            return batch

        def get_batch(self, names: List[str]) -> Optional[List[int]]:
            if self.position >= len(batches):
                return None  # TensorRT's signal that calibration data is exhausted
            host = batches[self.position]
            cuda_check(rt.cudaMemcpy(self.device, host.ctypes.data, self.nbytes,
                              rt.cudaMemcpyKind.cudaMemcpyHostToDevice))
            self.position += 1
            return [int(self.device)]

        def read_calibration_cache(self) -> Optional[bytes]:
            return cache.read_bytes() if cache.is_file() else None

        def write_calibration_cache(self, blob: Any) -> None:
            with atomic_path(cache) as tmp:
                tmp.write_bytes(bytes(blob))
            self.written = True

        def close(self) -> None:
            """Free the device buffer once the build is done."""
            if self.device is not None:
                cuda_check(rt.cudaFree(self.device))
                self.device = None

    calibrator = EntropyCalibrator()
    calibrator.reused = cache.is_file()  # TensorRT reads it and skips the calibration passes
    return calibrator


def configure_implicit_int8(config: trt.IBuilderConfig, module: ModuleType, calibrator: Any) -> dict:
    """INT8 with the calibrator, and FP16 for the layers without INT8 (see the module docstring)."""
    if not TYPE_CHECKING:
        trt = module
    config.set_flag(trt.BuilderFlag.INT8)
    config.set_flag(trt.BuilderFlag.FP16)
    config.int8_calibrator = calibrator
    return {"int8": True, "fp16": True, "implicit_quantization": True, "calibrator": CALIBRATOR}


def pinned_to_gpu(config: trt.IBuilderConfig, network: trt.INetworkDefinition, module: ModuleType,
                  is_pinned: Callable[[str], bool]) -> List[str]:
    """Run the fp32-pinned layers on the GPU: the DLA has no fp32 (see the module docstring)."""
    if not TYPE_CHECKING:
        trt = module
    names = []
    for i in range(network.num_layers):
        layer = network.get_layer(i)
        if is_pinned(layer.name):
            config.set_device_type(layer, trt.DeviceType.GPU)
            names.append(layer.name)
    return names


def calibration_record(manifest: dict, cache: Path, used: int, reused: bool) -> dict:
    """The sidecar's calibration fields of a calibrated engine."""
    blob = cache.read_bytes() if cache.is_file() else b""
    return {"calibrator": CALIBRATOR, "manifest_sha256": manifest["sha256"], "images": used,
            "manifest_images": manifest["images"], "cache": cache.name, "cache_reused": reused,
            "cache_sha256": hashlib.sha256(blob).hexdigest() if blob else None}
