"""A `tensorrt` stand-in for one release branch, generated from NVIDIA's pybind11 bindings of that branch.

Names, argument lists, read-only properties and enum members come from engine/data/trt_python_api.json
(tools/gen_trt_sources.py reads NVIDIA/TensorRT python/src on each release branch): a member the branch does
not bind does not exist here, a call whose arguments match none of the binding's overloads raises pybind11's
TypeError, and a read-only property cannot be set. The ONNX parser imports what that release's onnx-tensorrt
operator table allows (engine/data/onnx_trt_ops.json). What NVIDIA documents as a precondition is enforced,
each with its source beside it. Built "engines" carry the ONNX and run it through ONNX Runtime on the
`device.Device` memory, so the real runner's copies, bindings and graphs move real numbers.
"""
from __future__ import annotations

import json
import sys
import types
from pathlib import Path
from typing import Any

import numpy as np

from mlit_edge.engine.trt_sources import op_table
from mlit_edge.runtime.trt_runner import NUMPY_TYPES

from .device import Device

API = Path(__file__).resolve().parents[2] / "mlit_edge" / "engine" / "data" / "trt_python_api.json"
MAGIC = b"MLIT-STANDIN-PLAN\n"
NP = NUMPY_TYPES  # the runner's own DataType -> numpy map
ONNX_TYPES = {1: "FLOAT", 2: "UINT8", 3: "INT8", 6: "INT32", 7: "INT64", 9: "BOOL", 10: "HALF"}
LAYER_OF_OP = {"Conv": "CONVOLUTION", "MatMul": "MATRIX_MULTIPLY", "Gemm": "MATRIX_MULTIPLY", "Softmax": "SOFTMAX",
               "TopK": "TOPK", "LayerNormalization": "NORMALIZATION", "ReduceMean": "REDUCE", "ReduceSum": "REDUCE",
               "ReduceMax": "REDUCE", "Concat": "CONCATENATION", "Gather": "GATHER", "GatherElements": "GATHER",
               "Slice": "SLICE", "Split": "SLICE", "Expand": "SLICE", "Tile": "SLICE", "Constant": "CONSTANT",
               "Cast": "CAST", "Shape": "SHAPE", "Where": "SELECT", "QuantizeLinear": "QUANTIZE",
               "DequantizeLinear": "DEQUANTIZE", "Einsum": "EINSUM", "OneHot": "ONE_HOT", "Sigmoid": "ACTIVATION",
               "Relu": "ACTIVATION", "Tanh": "ACTIVATION", "Sqrt": "UNARY", "Exp": "UNARY", "Erf": "UNARY",
               "Neg": "UNARY", "Reciprocal": "UNARY", "Reshape": "SHUFFLE", "Transpose": "SHUFFLE",
               "Flatten": "SHUFFLE", "Squeeze": "SHUFFLE", "Unsqueeze": "SHUFFLE"}
# [stand-in's own model, not NVIDIA's answer] the layer types it lets a DLA take; on a device the answer is
# IBuilderConfig.can_run_on_DLA's
DLA_TYPES = {"CONVOLUTION", "ACTIVATION", "POOLING", "SCALE", "SOFTMAX", "SHUFFLE", "CONCATENATION", "UNARY"}


# ------------------------------------------------------------------------------------- binding machinery

class EnumMember:
    """A pybind11 enum value: str() is "Enum.NAME", int() its value."""

    def __init__(self, owner: str, name: str, value: int) -> None:
        self.owner, self.name, self.value = owner, name, value

    def __int__(self) -> int:
        return self.value

    __index__ = __int__

    def __repr__(self) -> str:
        return f"<{self.owner}.{self.name}: {self.value}>"

    def __str__(self) -> str:
        return f"{self.owner}.{self.name}"

    def __hash__(self) -> int:
        return hash((self.owner, self.value))

    def __eq__(self, other) -> bool:
        return isinstance(other, EnumMember) and (other.owner, other.value) == (self.owner, self.value)


def make_enum(name: str, members: list[str], values: dict | None = None) -> type:
    body = {m: EnumMember(name, m, (values or {}).get(m, i)) for i, m in enumerate(members)}
    body["__members__"] = dict(body)
    return type(name, (), body)


def _accepts(overload: list | None, args: tuple, kwargs: dict) -> bool:
    if overload is None:  # the binding names no arguments: only the count the implementation takes is known
        return True
    names = [a["name"] for a in overload]
    if len(args) > len(names) or any(k not in names[len(args):] for k in kwargs):
        return False
    given = set(names[:len(args)]) | set(kwargs)
    return all(a["name"] in given or a["default"] for a in overload)


class Bound:
    """Base of every stand-in binding class: attribute access and calls held to one branch's bindings."""

    _binding = "?"
    _api: dict = {}
    _branch = "?"

    def __getattribute__(self, name: str) -> Any:
        cls = type(self)
        if name.startswith("_") or "_binding" not in cls.__dict__:  # a Python subclass (a calibrator) is free
            return object.__getattribute__(self, name)
        api = cls._api
        if name not in api.get("members", ()):
            raise AttributeError(f"'tensorrt.{cls._binding}' object has no attribute '{name}' "
                                 f"(not bound in NVIDIA/TensorRT {cls._branch})")
        try:
            value = object.__getattribute__(self, name)
        except AttributeError:
            return _unmodelled(cls, name)
        overloads = api.get("signatures", {}).get(name)
        if overloads and callable(value) and not isinstance(value, (Bound, EnumMember)):
            return _checked(cls, name, value, overloads)
        return value

    def __setattr__(self, name: str, value: Any) -> None:
        cls = type(self)
        if not name.startswith("_") and "_binding" in cls.__dict__:
            if name not in cls._api.get("members", ()):
                raise AttributeError(f"'tensorrt.{cls._binding}' object has no attribute '{name}'")
            if cls._api.get("properties", {}).get(name) == "ro":
                raise AttributeError(f"can't set attribute '{name}' of tensorrt.{cls._binding} (read-only)")
        object.__setattr__(self, name, value)


def _set(obj, **fields) -> None:
    """Set what the bindings expose read-only, from inside the stand-in (TensorRT's C++ side does)."""
    for name, value in fields.items():
        object.__setattr__(obj, name, value)


def _unmodelled(cls, name):
    def call(*a, **k):
        raise NotImplementedError(f"stand-in tensorrt {cls._branch}: {cls._binding}.{name} is bound but not modelled")
    return call


def _checked(cls, name, fn, overloads):
    def call(*args, **kwargs):
        if not any(_accepts(o, args, kwargs) for o in overloads):
            sigs = "\n".join(f"    {i + 1}. (self, " + ", ".join(a["name"] + ("=..." if a["default"] else "")
                                                              for a in (o or [])) + ")"
                             for i, o in enumerate(overloads))
            raise TypeError(f"{name}(): incompatible function arguments. The following argument types are "
                            f"supported:\n{sigs}\n\nInvoked with: {args!r}, {kwargs!r}")
        return fn(*args, **kwargs)
    return call


# ---------------------------------------------------------------------------------------- the behaviour

class Logger:
    INTERNAL_ERROR, ERROR, WARNING, INFO, VERBOSE = range(5)

    def __init__(self, min_severity=1):
        _set(self, min_severity=min_severity)
        self._messages: list[str] = []

    def log(self, severity, msg):
        self._messages.append(msg)
        if int(severity) <= int(self.min_severity):  # TensorRT's default logger prints to stderr, as this does
            print(f"[TensorRT stand-in] {msg}", file=sys.stderr)


class ILogger:
    """The logger base a Python logger subclasses (pyCore.cpp's PyLogger): engine.plan's escapes what it prints."""
    INTERNAL_ERROR, ERROR, WARNING, INFO, VERBOSE = range(5)

    def __init__(self):
        pass


class Tensor:
    def __init__(self, name, dtype, shape):
        _set(self, name=name, dtype=dtype, shape=tuple(shape))


class Layer:
    def __init__(self, name, kind, outputs):
        self._outputs, self._inputs, self._output_types = outputs, [], {}
        _set(self, name=name, type=kind, precision=None, num_outputs=len(outputs))

    def get_output(self, index):
        return self._outputs[index]

    def get_input(self, index):
        return self._inputs[index]

    num_inputs = property(lambda self: len(self._inputs))

    def set_output_type(self, index, dtype):
        self._output_types[index] = dtype


class Network:
    def __init__(self, flags: int):
        self._flags, self._layers, self._inputs, self._outputs = flags, [], [], []
        self._onnx = b""

    num_layers = property(lambda self: len(self._layers))
    num_inputs = property(lambda self: len(self._inputs))
    num_outputs = property(lambda self: len(self._outputs))

    def get_layer(self, index):
        return self._layers[index]

    def get_input(self, index):
        return self._inputs[index]

    def get_output(self, index):
        return self._outputs[index]


class OptimizationProfile:
    def __init__(self):
        self._shapes: dict = {}

    def set_shape(self, input, min, opt, max):  # noqa: A002 (the binding's own argument names)
        self._shapes[input] = (tuple(min), tuple(opt), tuple(max))

    def get_shape(self, input):  # noqa: A002
        return self._shapes.get(input)


class TimingCache:
    def __init__(self, blob: bytes):
        self._blob = bytes(blob)

    def serialize(self):
        return HostMemory(self._blob or b"timing-cache")


class HostMemory:
    def __init__(self, data: bytes):
        self._data = data
        _set(self, nbytes=len(data))

    def __bytes__(self):
        return self._data

    def __buffer__(self, flags):  # bytes(...) of the real IHostMemory goes through the buffer protocol
        return memoryview(self._data)


class EngineInspector:
    def __init__(self, engine):
        self._engine = engine

    def get_engine_information(self, format):  # noqa: A002
        meta = self._engine._meta
        if meta["verbosity"] == "DETAILED":  # per-layer dicts; with less, names only (NvInfer.h ProfilingVerbosity)
            layers = [{"Name": l["name"], "LayerType": l["type"], "Precision": l["precision"],
                       "Device": l["device"]} for l in meta["layers"]]
        else:
            layers = [l["name"] for l in meta["layers"]]
        return json.dumps({"Layers": layers, "Bindings": [t["name"] for t in meta["inputs"] + meta["outputs"]]})


# ----------------------------------------------------------------------------------------------- module

class StandIn:
    """One branch's module, its device and its data."""

    def __init__(self, branch: str, version: str, device: Device) -> None:
        api = json.loads(API.read_text())["branches"][branch]
        self.branch, self.version, self.device, self.api = branch, version, device, api
        self.module = types.ModuleType("tensorrt")
        m = self.module
        m.__version__, m.__stand_in__ = version, f"NVIDIA/TensorRT {branch} @ {api['commit'][:12]}"
        for name, members in api["enums"].items():
            setattr(m, name, make_enum(name, members))
        self.table = op_table(version)
        for name, impl in self._classes().items():
            entry = api["classes"].get(name)
            if entry is None:
                continue
            setattr(m, name, type(name, (Bound, impl) if impl is not Bound else (Bound,),
                                  {"_binding": name, "_api": entry, "_branch": branch}))
        m.Logger.INTERNAL_ERROR, m.Logger.ERROR, m.Logger.WARNING, m.Logger.INFO, m.Logger.VERBOSE = range(5)
        m.Dims = type("Dims", (tuple,), {})
        m.nptype = lambda t: NP[str(t).rsplit(".", 1)[-1]]

    def dtype(self, name: str):
        if name == "INT64" and not hasattr(self.module.DataType, "INT64"):
            name = "INT32"  # TensorRT 8.x has no INT64: onnx-tensorrt imports INT64 tensors as INT32
        return getattr(self.module.DataType, name)

    def _classes(self) -> dict:
        s = self
        m = self.module

        class Builder:
            def __init__(self, logger):
                self._logger = logger
                object.__setattr__(self, "num_DLA_cores", s.device.dla_cores)

            def create_network(self, flags=0):
                return m.INetworkDefinition(flags)

            def create_builder_config(self):
                return m.IBuilderConfig()

            def create_optimization_profile(self):
                return m.IOptimizationProfile()

            def build_serialized_network(self, network, config):
                return s.build(network, config, self._logger)

        class BuilderConfig:
            def __init__(self):
                object.__setattr__(self, "_flags", set())
                object.__setattr__(self, "_profiles", [])
                object.__setattr__(self, "_calibration_profile", None)
                object.__setattr__(self, "_device_types", {})
                object.__setattr__(self, "_timing_cache", None)
                for name, value in (("DLA_core", -1), ("default_device_type", m.DeviceType.GPU),
                                    ("int8_calibrator", None),
                                    ("profiling_verbosity", getattr(m.ProfilingVerbosity, "LAYER_NAMES_ONLY"))):
                    object.__setattr__(self, name, value)
                # TF32 is on by default (NvInfer.h: "TF32 ... enabled by default"); the FP16/INT8 flags are off
                if hasattr(m.BuilderFlag, "TF32"):
                    self._flags.add(m.BuilderFlag.TF32)

            def set_flag(self, flag):
                self._flags.add(flag)

            def clear_flag(self, flag):
                self._flags.discard(flag)

            def get_flag(self, flag):
                return flag in self._flags

            def set_memory_pool_limit(self, pool, pool_size):
                pass

            def add_optimization_profile(self, profile):
                self._profiles.append(profile)
                return len(self._profiles) - 1

            def set_calibration_profile(self, profile):
                object.__setattr__(self, "_calibration_profile", profile)
                return True

            def get_calibration_profile(self):
                return self._calibration_profile

            def can_run_on_DLA(self, layer):
                return str(layer.type).rsplit(".", 1)[-1] in DLA_TYPES

            def set_device_type(self, layer, device_type):
                self._device_types[layer.name] = device_type

            def get_device_type(self, layer):
                return self._device_types.get(layer.name, self.default_device_type)

            def create_timing_cache(self, serialized_timing_cache):
                return TimingCache(serialized_timing_cache)

            def set_timing_cache(self, cache, ignore_mismatch):
                object.__setattr__(self, "_timing_cache", cache)
                return True

            def get_timing_cache(self):
                return self._timing_cache

        class Parser:
            def __init__(self, network, logger):
                self._network, self._errors = network, []

            def parse_from_file(self, model):
                return self.parse(Path(model).read_bytes())

            def parse(self, model, path=None):
                self._errors = s.parse(self._network, bytes(model))
                return not self._errors

            @property
            def num_errors(self):
                return len(self._errors)

            def get_error(self, index):
                return self._errors[index]

        class Runtime:
            def __init__(self, logger):
                self._logger = logger
                object.__setattr__(self, "DLA_core", -1)
                object.__setattr__(self, "num_DLA_cores", s.device.dla_cores)

            def deserialize_cuda_engine(self, serialized_engine):
                return s.deserialize(bytes(serialized_engine), self)

        class Engine:
            def __init__(self, meta, onnx):
                object.__setattr__(self, "_meta", meta)
                object.__setattr__(self, "_onnx", onnx)
                object.__setattr__(self, "_session", None)
                self._tensors = {t["name"]: t for t in meta["inputs"] + meta["outputs"]}
                self._order = [t["name"] for t in meta["inputs"] + meta["outputs"]]

            num_io_tensors = property(lambda self: len(self._order))
            device_memory_size = property(lambda self: 1 << 20)
            device_memory_size_v2 = device_memory_size
            num_layers = property(lambda self: len(self._meta["layers"]))

            def get_tensor_name(self, index):
                return self._order[index]

            def get_tensor_mode(self, name):
                is_input = any(t["name"] == name for t in self._meta["inputs"])
                return m.TensorIOMode.INPUT if is_input else m.TensorIOMode.OUTPUT

            def get_tensor_dtype(self, name):
                return s.dtype(self._tensors[name]["dtype"])

            def get_tensor_shape(self, name):
                return m.Dims(self._tensors[name]["shape"])

            def create_execution_context(self):
                return m.IExecutionContext(self)

            def create_engine_inspector(self):
                return m.EngineInspector(self)

        class Context:
            def __init__(self, engine):
                self._engine, self._shapes, self._addresses = engine, {}, {}

            def set_input_shape(self, name, shape):
                lo, hi = s.profile_range(self._engine._meta)
                if not lo <= shape[0] <= hi:
                    return False
                self._shapes[name] = tuple(shape)
                return True

            def get_tensor_shape(self, name):
                t = self._engine._tensors[name]
                batch = next(iter(self._shapes.values()), t["shape"])[0]
                return m.Dims([batch if d < 0 else d for d in t["shape"]])

            def set_tensor_address(self, name, memory):
                self._addresses[name] = int(memory)
                return True

            def execute_async_v3(self, stream_handle):
                return s.execute(self, stream_handle)

        return {"Builder": Builder, "IBuilderConfig": BuilderConfig, "OnnxParser": Parser, "Runtime": Runtime,
                "ICudaEngine": Engine, "IExecutionContext": Context, "INetworkDefinition": Network,
                "ILayer": Layer, "ITensor": Tensor, "IOptimizationProfile": OptimizationProfile,
                "ITimingCache": TimingCache, "IHostMemory": HostMemory, "EngineInspector": EngineInspector,
                "Logger": Logger, "ILogger": ILogger, "IInt8EntropyCalibrator2": Bound}

    # ------------------------------------------------------------------------------------------ parsing
    def parse(self, network, model: bytes) -> list[str]:
        """The network of an ONNX model, or the parser's errors (onnx-tensorrt's rules for this release)."""
        import onnx

        m = self.module
        errors = []
        if self.version.startswith("8.") and not network._flags & (1 << int(m.NetworkDefinitionCreationFlag.EXPLICIT_BATCH)):
            # onnx-tensorrt 8.5-GA/8.6-GA ModelImporter.cpp: the parser needs an explicit-batch network
            return ["ModelImporter: This version of the ONNX parser only supports TensorRT INetworkDefinitions "
                    "with an explicit batch dimension"]
        proto = onnx.load_from_string(model)
        opset = max((o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")), default=0)
        if opset > self.table.max_opset:
            errors.append(f"opset {opset} is newer than this parser's {self.table.max_opset} ({self.table.branch})")
        for node in proto.graph.node:
            if not self.table.supported(node.op_type):
                errors.append(f"node {node.name}: No importer registered for op: {node.op_type} ({self.table.branch})")
        if errors:
            return errors
        proto = onnx.shape_inference.infer_shapes(proto)
        types_of = {v.name: v.type.tensor_type.elem_type for v in
                    list(proto.graph.value_info) + list(proto.graph.input) + list(proto.graph.output)}

        def tensor(v):
            dims = [d.dim_value if d.HasField("dim_value") else -1 for d in v.type.tensor_type.shape.dim]
            return m.ITensor(v.name, self.dtype(ONNX_TYPES.get(v.type.tensor_type.elem_type, "FLOAT")), dims)

        inits = {i.name for i in proto.graph.initializer}
        network._inputs = [tensor(v) for v in proto.graph.input if v.name not in inits]
        network._outputs = [tensor(v) for v in proto.graph.output]
        kinds = m.LayerType.__members__
        made = {t.name: t for t in network._inputs}
        for node in proto.graph.node:
            outs = [m.ITensor(o, self.dtype(ONNX_TYPES.get(types_of.get(o, 1), "FLOAT")), ()) for o in node.output]
            made.update((t.name, t) for t in outs)
            kind = LAYER_OF_OP.get(node.op_type, "IDENTITY")
            if kind not in kinds:  # e.g. 8.5 has no NORMALIZATION (the profile decomposes LayerNorm there)
                kind = "IDENTITY"
            layer = m.ILayer(node.name, kinds[kind], outs)
            layer._inputs = [made[i] for i in node.input if i in made]
            network._layers.append(layer)
            if node.op_type == "Gemm" and len(node.input) > 2 and self.version.startswith("8.5"):
                # 8.5-GA's Gemm importer (builtin_op_importers.cpp) adds the bias in a second layer it does not
                # name after the node: TensorRT's default "(Unnamed Layer* N) [ElementWise]"
                mm_out = m.ITensor(f"{node.name}_mm", outs[0].dtype, ())
                layer._outputs = [mm_out]
                bias = m.ILayer(f"(Unnamed Layer* {len(network._layers)}) [ElementWise]", kinds["ELEMENTWISE"], outs)
                bias._inputs = [mm_out]
                network._layers.append(bias)
        network._onnx = model
        return []

    # ------------------------------------------------------------------------------------------ building
    def build(self, network, config, logger):
        """The preconditions NVIDIA documents, then an engine that carries the ONNX; None (with the reason
        logged, as TensorRT does) when one fails."""
        m = self.module
        inp = network._inputs[0]
        dynamic = any(d < 0 for d in inp.shape)
        shapes = next((p._shapes[inp.name] for p in config._profiles if inp.name in p._shapes), None)
        if dynamic and shapes is None:
            # NvInfer.h IBuilderConfig::addOptimizationProfile: a network with runtime dimensions needs one
            return self._refuse(logger, "Network has dynamic or shape inputs, but no optimization profile has "
                                        "been defined.")
        static = not dynamic or shapes[0][0] == shapes[2][0]
        dla = config.default_device_type == m.DeviceType.DLA
        placement = []
        for layer in network._layers:
            on_dla = dla and config.get_device_type(layer) == m.DeviceType.DLA and config.can_run_on_DLA(layer)
            placement.append("DLA" if on_dla else "GPU")
        if dla:
            if not 0 <= config.DLA_core < self.device.dla_cores:
                return self._refuse(logger, f"DLA core {config.DLA_core} does not exist on this platform")
            if not static:  # TensorRT developer guide, "Working with DLA": the DLA takes static shapes only
                return self._refuse(logger, "DLA layers need static shapes: the optimization profile's batch "
                                            f"ranges {shapes[0][0]}..{shapes[2][0]}")
        calibrated = config.get_flag(m.BuilderFlag.INT8) and config.int8_calibrator is not None
        if calibrated:
            cal_shape = inp.shape
            if dynamic:
                prof = config.get_calibration_profile()
                if prof is None:  # NvInfer.h (8.5-10.x) setCalibrationProfile: "must be set if int8 calibration
                    # is used to set scales for a network with runtime dimensions"
                    return self._refuse(logger, "Calibration profile must be set when calibrating a network "
                                                "with runtime dimensions (IBuilderConfig::setCalibrationProfile)")
                cal_shape = prof._shapes[inp.name][1]
            if not self._calibrate(config.int8_calibrator, inp, cal_shape, logger):
                return None
        typed = "FLOAT"
        if not network._flags & (1 << int(getattr(m.NetworkDefinitionCreationFlag, "STRONGLY_TYPED", EnumMember("", "", 99)))):
            typed = "INT8" if calibrated else "HALF" if config.get_flag(m.BuilderFlag.FP16) else "FLOAT"
        layers = [{"name": l.name, "type": str(l.type).rsplit(".", 1)[-1], "device": where,
                   "precision": str(l.precision).rsplit(".", 1)[-1] if l.precision is not None else typed}
                  for l, where in zip(network._layers, placement)]
        meta = {"version": self.version, "branch": self.branch,
                "inputs": [{"name": t.name, "dtype": str(t.dtype).rsplit(".", 1)[-1], "shape": list(t.shape)}
                           for t in network._inputs],
                "outputs": [{"name": t.name, "dtype": str(t.dtype).rsplit(".", 1)[-1], "shape": list(t.shape)}
                            for t in network._outputs],
                "profile": [list(s) for s in shapes] if shapes else None,
                "dla_core": config.DLA_core if dla else None, "layers": layers,
                "verbosity": str(config.profiling_verbosity).rsplit(".", 1)[-1],
                "flags": sorted(str(f).rsplit(".", 1)[-1] for f in config._flags)}
        self.device.events.append(f"built: {json.dumps({k: meta[k] for k in ('profile', 'dla_core', 'flags')})}")
        head = json.dumps(meta).encode()
        return m.IHostMemory(MAGIC + len(head).to_bytes(8, "little") + head + network._onnx)

    def _refuse(self, logger, why: str):
        logger.log(Logger.ERROR, why)
        self.device.events.append(f"build refused: {why}")
        return None

    def _calibrate(self, calibrator, inp, shape, logger) -> bool:
        """IInt8Calibrator's contract: get_batch_size() is the calibration batch; each get_batch(names) hands
        one device pointer per input holding batch x the binding's volume in the binding's type, until None."""
        if calibrator.read_calibration_cache() is not None:
            return True
        batch = calibrator.get_batch_size()
        if batch != shape[0]:
            return self._refuse(logger, f"calibrator batch size {batch} differs from the calibration shape {shape}")
        dtype = np.dtype(NP[str(inp.dtype).rsplit(".", 1)[-1]])
        nbytes = int(np.prod(shape)) * dtype.itemsize
        while True:
            pointers = calibrator.get_batch([inp.name])
            if pointers is None:
                break
            ptr = int(pointers[0])
            have = self.device.extent(ptr)
            record = {"binding_bytes": nbytes, "buffer_bytes": have, "dtype": dtype.name, "shape": list(shape)}
            self.device.calibration.append(record)
            if have < nbytes:
                return self._refuse(logger, f"calibration batch buffer holds {have} bytes, the binding needs {nbytes}")
            record["data"] = np.frombuffer(self.device.read(ptr, nbytes), dtype).reshape(shape).copy()
        calibrator.write_calibration_cache(b"stand-in calibration table")
        return True

    # ---------------------------------------------------------------------------------------- running
    def deserialize(self, blob: bytes, runtime):
        m = self.module
        if not blob.startswith(MAGIC):
            runtime._logger.log(Logger.ERROR, "not a serialized engine")
            return None
        size = int.from_bytes(blob[len(MAGIC):len(MAGIC) + 8], "little")
        meta = json.loads(blob[len(MAGIC) + 8:len(MAGIC) + 8 + size])
        onnx = blob[len(MAGIC) + 8 + size:]
        if meta["version"] != self.version:  # a plan runs only on the TensorRT that built it
            runtime._logger.log(Logger.ERROR, f"engine built with {meta['version']}, this is {self.version}")
            return None
        if meta["dla_core"] is not None and runtime.DLA_core != meta["dla_core"]:
            # NvInferRuntime.h IRuntime::setDLACore: the DLA core the engine executes on, set before
            # deserializeCudaEngine (default -1); trtexec sets it from --useDLACore before deserializing
            self.device.events.append(f"deserialize refused: DLA plan for core {meta['dla_core']}, "
                                      f"Runtime.DLA_core {runtime.DLA_core}")
            runtime._logger.log(Logger.ERROR, "DLA engine deserialized without Runtime.DLA_core set to its core")
            return None
        return m.ICudaEngine(meta, onnx)

    @staticmethod
    def profile_range(meta) -> tuple[int, int]:
        if meta["profile"] is None:
            b = meta["inputs"][0]["shape"][0]
            return b, b
        return meta["profile"][0][0], meta["profile"][2][0]

    def execute(self, context, stream_handle) -> bool:
        engine = context._engine
        meta = engine._meta
        names = [t["name"] for t in meta["inputs"] + meta["outputs"]]
        if any(n not in context._addresses for n in names):
            return False
        if any(t["name"] not in context._shapes and -1 in t["shape"] for t in meta["inputs"]):
            return False

        def run() -> bool:
            import onnxruntime as ort

            if engine._session is None:
                object.__setattr__(engine, "_session", ort.InferenceSession(engine._onnx,
                                                                           providers=["CPUExecutionProvider"]))
            feed = {}
            for t in meta["inputs"]:
                shape = tuple(context.get_tensor_shape(t["name"]))
                dtype = np.dtype(NP[t["dtype"]])
                raw = self.device.read(context._addresses[t["name"]], int(np.prod(shape)) * dtype.itemsize)
                feed[t["name"]] = np.frombuffer(raw, dtype).reshape(shape)
            outs = engine._session.run([t["name"] for t in meta["outputs"]], feed)
            for t, value in zip(meta["outputs"], outs):
                self.device.write(context._addresses[t["name"]], np.ascontiguousarray(value, NP[t["dtype"]]).tobytes())
            return True

        if meta["dla_core"] is not None:  # a DLA engine's enqueue cannot be captured (NVIDIA/TensorRT#3524)
            run.uncapturable = True
        return self.device.enqueue(stream_handle, run, "execute_async_v3")
