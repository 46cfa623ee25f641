"""TensorRT plans: build a raw `.plan` from a precision-carrying ONNX, with its sidecar.

The device profile (`devices.profiles`) decides the typing. On TensorRT >= 10 (and TensorRT-RTX) the
network is strongly typed: precision comes from the ONNX (fp16 casts, INT8 Q/DQ), never from builder
flags. TensorRT 8.5 and 8.6 (JetPack 5.1 and 6.0) have no strongly typed mode: the network is made with
EXPLICIT_BATCH, the FP16/INT8 flags match what the ONNX carries, and LayerNorm, softmax, the router and
the head are pinned to fp32 with OBEY_PRECISION_CONSTRAINTS. The `.plan` stays raw so trtexec and DeepStream load it; its `.plan.json` sidecar
records what it was built from, with what, and for which device. Loading and verifying plans is
the runtime's job (`devices.trt_env`), since a device needs it without this stage.
"""
from __future__ import annotations

import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

from ..runtime.artifact import BATCH_PROFILE
from ..artifacts.schema import ArtifactRecord
from ..artifacts.sidecar import atomic_path, publish, temporary_beside, user_fields
from ..devices.trt_env import DeviceEnv
from ..base.messages import printable

if TYPE_CHECKING:
    import tensorrt as trt

@dataclass(frozen=True)
class BuildOptions:
    """Builder settings; `profile` is (min, opt, max) batch for a dynamic-batch ONNX."""

    profile: tuple[int, int, int] = BATCH_PROFILE
    workspace_gib: float = 1.0
    timing_cache: str | None = None
    dla_core: int | None = None
    strongly_typed: bool = True  # the device profile's typing (devices.profiles): False for TensorRT 8.x
    precision: str = "fp32"  # what the ONNX carries: a weakly typed build sets the builder flags for it
    fp32_layers: tuple[str, ...] = ()  # ONNX nodes a weakly typed build pins to fp32 (the sidecar's fp32_layers)
    calibrator: Any = None  # an IInt8EntropyCalibrator2 (engine/dla_int8.py): implicit INT8 from the fp32 ONNX
    # ProfilingVerbosity.DETAILED: the engine keeps each layer's type, precision and tactic for IEngineInspector
    # (what engine_compare reads fusion from); with the default, get_engine_information lists layer names only
    detailed: bool = True


def network_flags(module: ModuleType, strongly_typed: bool) -> int:
    """The network creation flags of the profile's typing. TensorRT >= 10 (and TensorRT-RTX) build strongly
    typed: precision comes from the ONNX. TensorRT 8.x has no STRONGLY_TYPED (NVIDIA/TensorRT release/8.5 and
    release/8.6, python/src/infer/pyCore.cpp) and its ONNX parser refuses an implicit-batch network
    (onnx-tensorrt 8.6-GA ModelImporter.cpp: "only supports TensorRT INetworkDefinitions with an explicit batch
    dimension"), so a weakly typed network is created with EXPLICIT_BATCH, never with flags = 0."""
    if not TYPE_CHECKING:
        trt = module
    kinds = trt.NetworkDefinitionCreationFlag
    if strongly_typed:
        if not hasattr(kinds, "STRONGLY_TYPED"):
            raise RuntimeError(f"{trt.__name__} {trt.__version__} has no strongly typed networks (TensorRT 8.x): "
                               "build with this device's profile (--jetpack 5.1 or 6.0)")
        return 1 << int(kinds.STRONGLY_TYPED)
    return 1 << int(kinds.EXPLICIT_BATCH)


def _pinned(name: str, fp32_layers: frozenset[str]) -> bool:
    """Whether a TensorRT layer comes from one of the ONNX nodes `fp32_layers` names. onnx-tensorrt names a
    node's layer after the node, and a second layer of it NAME_N (8.5-GA ImporterContext.cpp registerLayer,
    ImporterContext.hpp generateUniqueName; the same in 8.6-GA)."""
    base, _, suffix = name.rpartition("_")
    return name in fp32_layers or (suffix.isdigit() and base in fp32_layers)


def _unnamed_tail(layer: trt.ILayer, pinned_outputs: set[str]) -> bool:
    """A layer the parser left with TensorRT's default name that reads a pinned layer's output: 8.5-GA's Gemm
    importer adds the bias in such a layer (builtin_op_importers.cpp, DEFINE_BUILTIN_OP_IMPORTER(Gemm): the
    ElementWise sum is never registered under the node's name), so the head's bias would escape the pin."""
    if not layer.name.startswith("(Unnamed Layer"):
        return False
    return any(layer.get_input(j) is not None and layer.get_input(j).name in pinned_outputs
               for j in range(layer.num_inputs))


def pin_fp32(network: trt.INetworkDefinition, module: ModuleType, fp32_layers: tuple[str, ...]) -> list[str]:
    """Keep LayerNorm, softmax, the router and the head in fp32 in a weakly typed network (with
    OBEY_PRECISION_CONSTRAINTS set on the config): TensorRT 8.x may otherwise run them in half precision, the
    known ViT FP16 failure (NVIDIA/TensorRT#2564). Returns the pinned layers' names (a DLA build moves them to
    the GPU: engine/dla_int8.py)."""
    if not TYPE_CHECKING:
        trt = module
    names, pinned = frozenset(fp32_layers), []
    floats = (trt.DataType.FLOAT, trt.DataType.HALF)
    kinds = {trt.LayerType.SOFTMAX}
    if hasattr(trt.LayerType, "NORMALIZATION"):  # INormalizationLayer came with 8.6; 8.5 has no such layer
        kinds.add(trt.LayerType.NORMALIZATION)
    pinned_outputs: set[str] = set()
    for i in range(network.num_layers):
        layer = network.get_layer(i)
        if not (_pinned(layer.name, names) or layer.type in kinds or _unnamed_tail(layer, pinned_outputs)):
            continue
        pinned_outputs.update(layer.get_output(j).name for j in range(layer.num_outputs))
        layer.precision = trt.DataType.FLOAT
        for j in range(layer.num_outputs):
            if layer.get_output(j).dtype in floats:  # TopK's indices stay integers
                layer.set_output_type(j, trt.DataType.FLOAT)
        pinned.append(layer.name)
    return pinned


def _logger(module: ModuleType):
    """A TensorRT logger that prints the errors TensorRT reports (as trt.Logger(ERROR) does) with control
    characters escaped (`printable`): its messages quote op, node and tensor names from the ONNX file."""
    if not TYPE_CHECKING:
        trt = module

    class Escaped(trt.ILogger):
        def __init__(self) -> None:
            trt.ILogger.__init__(self)

        def log(self, severity: trt.ILogger.Severity, msg: str) -> None:
            if int(severity) <= int(trt.ILogger.ERROR):  # INTERNAL_ERROR is 0, ERROR 1 (NvInferRuntimeBase.h)
                for line in str(msg).splitlines():  # each line escaped and marked: a name cannot forge one
                    print(printable(f"[TRT] [E] {line}"), file=sys.stderr, flush=True)

    return Escaped()


def _unbuildable_inputs(network: trt.INetworkDefinition) -> str | None:
    """Why the parsed network's inputs cannot be built with one batch profile, in a line naming the input and
    its dims: no input at all, or an input dynamic beyond its first (batch) dimension (TensorRT's
    IOptimizationProfile.set_shape would throw; a static report says which)."""
    if network.num_inputs == 0:
        return "the network has no input: an engine needs one (the graph's inputs are all initializers, or none)"
    for i in range(network.num_inputs):
        t = network.get_input(i)
        dims = list(t.shape[:])  # Dims slices to a tuple
        if any(d == -1 for d in dims[1:]) or (i > 0 and dims[:1] == [-1]):
            return (f"input {t.name} has dynamic dimensions besides the batch (its dims: {dims}, -1: dynamic): "
                    "an engine is built with one batch profile on the first input; export with a fixed size")
    return None


def build_serialized(onnx_path: str | Path, module: ModuleType, opts: BuildOptions = BuildOptions()) -> dict:
    """Parse and build with `module` (tensorrt or tensorrt_rtx); {"ok": True, "engine": bytes, layers,
    build_s, io, ...} or {"ok": False, "stage", "errors"} with the parser's errors verbatim. The flags in the
    result are what was really set."""
    if not TYPE_CHECKING:  # type-checked against TensorRT's API (tensorrt-stubs, tools/typecheck_trt.py)
        trt = module
    logger = _logger(module)
    builder = trt.Builder(logger)
    network = builder.create_network(network_flags(module, opts.strongly_typed))
    parser = trt.OnnxParser(network, logger)
    base = {"module": trt.__name__, "version": trt.__version__}
    start = time.perf_counter()
    if not parser.parse_from_file(str(onnx_path)):
        return {**base, "ok": False, "stage": "parse",
                "errors": [str(parser.get_error(i)) for i in range(parser.num_errors)]}
    config = builder.create_builder_config()
    config.set_memory_pool_limit(trt.MemoryPoolType.WORKSPACE, int(opts.workspace_gib * (1 << 30)))
    settings: dict = {"strongly_typed": opts.strongly_typed, "workspace_gib": opts.workspace_gib}
    if hasattr(trt.BuilderFlag, "TF32"):
        # TF32 is on by default (NvInfer.h BuilderFlag::kTF32, release/8.5-10.13): an "fp32" layer (a weakly
        # typed build's pins, a strongly typed fp32 graph) would multiply in TF32 on Ampere and Orin
        config.clear_flag(trt.BuilderFlag.TF32)
        settings["tf32"] = False
    if opts.detailed:
        config.profiling_verbosity = trt.ProfilingVerbosity.DETAILED
        settings["profiling_verbosity"] = "detailed"
    pinned: list[str] = []
    if not opts.strongly_typed:  # TensorRT 8.x: the builder flags carry the precision the ONNX holds
        settings.update(explicit_batch=True, fp16=opts.precision in ("fp16", "int8"), int8=opts.precision == "int8")
        if settings["fp16"]:
            config.set_flag(trt.BuilderFlag.FP16)
        if settings["int8"] and opts.calibrator is None:  # the Q/DQ graph is explicitly quantized: no calibrator
            config.set_flag(trt.BuilderFlag.INT8)
        elif opts.calibrator is not None:  # the DLA's INT8: calibrated from the fp32 graph (engine/dla_int8.py)
            from .dla_int8 import configure_implicit_int8

            settings.update(configure_implicit_int8(config, module, opts.calibrator))
        config.set_flag(trt.BuilderFlag.OBEY_PRECISION_CONSTRAINTS)
        pinned = pin_fp32(network, module, opts.fp32_layers)
        settings.update(obey_precision_constraints=True, fp32_layers=len(pinned))
    refused = _unbuildable_inputs(network)
    if refused:
        return {**base, "ok": False, "stage": "parse", "errors": [refused]}
    inp = network.get_input(0)
    rest = list(inp.shape[1:])  # Dims slices to a tuple
    if len(inp.shape) and inp.shape[0] == -1:
        lo, opt, hi = opts.profile
        profile = builder.create_optimization_profile()
        profile.set_shape(inp.name, trt.Dims([lo, *rest]), trt.Dims([opt, *rest]), trt.Dims([hi, *rest]))
        config.add_optimization_profile(profile)
        settings["profile"] = {"input": inp.name, "min": lo, "opt": opt, "max": hi}
        if opts.calibrator is not None:
            # IBuilderConfig::setCalibrationProfile (NvInfer.h, release/8.5-10.13): "must be set if int8
            # calibration is used to set scales for a network with runtime dimensions"; the calibrator's batches
            # have the profile's OPT shape, which a DLA build makes its one static batch
            config.set_calibration_profile(profile)
            settings["calibration_profile"] = {"input": inp.name, "batch": opt}
    else:
        settings["profile"] = {"input": inp.name, "static": int(inp.shape[0]) if len(inp.shape) else None}
    cache, cache_path = None, Path(opts.timing_cache) if opts.timing_cache else None
    if cache_path is not None:
        blob = cache_path.read_bytes() if cache_path.is_file() else b""
        cache = config.create_timing_cache(blob)
        config.set_timing_cache(cache, ignore_mismatch=False)
        settings["timing_cache"] = {"path": str(cache_path), "read_bytes": len(blob)}
    if opts.dla_core is not None:  # the layers the DLA cannot take, as TensorRT answers (engine/dla.py)
        from .dla import configure_dla, dla_placement

        settings["dla"] = configure_dla(builder, config, network, module, opts.dla_core)
        if not opts.strongly_typed:  # fp32 pins cannot stay fp32 on the DLA: they run on the GPU (dla_int8.py)
            from .dla_int8 import pinned_to_gpu

            settings["dla"]["fp32_gpu_layers"] = pinned_to_gpu(config, network, module, set(pinned).__contains__)
        settings["dla"].update(dla_placement(config, network, module))  # once every layer's device is set
        settings.update(dla_core=opts.dla_core, gpu_fallback=True)
    engine = builder.build_serialized_network(network, config)
    seconds = time.perf_counter() - start
    if engine is None:
        return {**base, "ok": False, "stage": "build",
                "errors": ["build_serialized_network returned no engine (see the TensorRT log above)"]}
    if cache is not None and cache_path is not None:
        with atomic_path(cache_path) as tmp:
            tmp.write_bytes(bytes(config.get_timing_cache().serialize()))
        settings["timing_cache"]["written_bytes"] = cache_path.stat().st_size
    io = {"inputs": [_tensor(network.get_input(i)) for i in range(network.num_inputs)],
          "outputs": [_tensor(network.get_output(i)) for i in range(network.num_outputs)]}
    return {**base, "ok": True, "engine": bytes(engine), "layers": network.num_layers, "build_s": round(seconds, 2),
            "flags": settings, "io": io}


def _tensor(t: trt.ITensor) -> dict:
    return {"name": t.name, "dtype": str(t.dtype).rsplit(".", 1)[-1].lower(), "shape": list(t.shape[:])}


def write_plan(engine: bytes, out: str | Path, info: dict) -> ArtifactRecord:
    """Publish the raw plan and its sidecar (`info`, the fields `engine_record` built) as a pair; returns the
    record as written."""
    with temporary_beside(out) as tmp:
        tmp.write_bytes(engine)
        return ArtifactRecord.from_json(publish(tmp, out, info))


def engine_record(onnx_path: str | Path, source: ArtifactRecord, source_sha256: str | None, result: dict,
                  env: DeviceEnv, target: str, frontend: str = "onnx", profile: dict | None = None) -> dict:
    """The `.plan.json` fields: the source ONNX's provenance (its record and sha256, as the build holds them)
    plus the builder, the device (its Jetson module too) and the flags really set. `profile`: the device
    profile the plan was built for (the ONNX's own when it is not given)."""
    src = user_fields(source.to_json())
    if profile is not None:
        src["profile"] = profile
    src.pop("inputs", None)
    src.pop("outputs", None)
    return {**src, "kind": "tensorrt-engine", "target": target, "frontend": frontend,
            "source_onnx": Path(onnx_path).name, "source_onnx_sha256": source_sha256,
            "calibration_sha256": source.calibration_sha256,
            "engine": {"builder": {"module": result["module"], "version": result["version"]}, "device": asdict(env),
                       "dla_core": result["flags"].get("dla_core"), "flags": result["flags"],
                       "layers": result.get("layers"), "build_s": result.get("build_s"), "io": result.get("io")}}
