"""A cuda-python runtime (`cuda.cudart` / `cuda.bindings.runtime`) stand-in with one version's real signatures.

The signatures, return arities, enum members and import paths come from that version's wheel
(tests/standins/data/cuda_python.json, made by tools/gen_cuda_signatures.py). Every function the wheel
defines exists here with exactly its parameters, so a call with CUDA 12's arguments to CUDA 11's
`cudaGraphInstantiate` raises the TypeError the real Cython function raises; a function the wheel lacks does
not exist. The functions the runtime uses are modelled on `device.Device`; any other one says it is not.
"""
from __future__ import annotations

import enum
import json
import types
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Callable

from .device import Device, Graph

DATA = Path(__file__).parent / "data" / "cuda_python.json"


def spec(version: str) -> dict:
    """One cuda-python version's recorded API."""
    versions = json.loads(DATA.read_text())["versions"]
    if version not in versions:
        raise KeyError(f"no cuda-python {version} in {DATA.name}: {sorted(versions)}")
    return versions[version]


def _bind(name: str, params: list[dict], args: tuple, kwargs: dict) -> dict:
    """Bind a call to the recorded parameter list the way a Cython `def` does, or raise its TypeError."""
    names = [p["name"] for p in params]
    required = [p["name"] for p in params if p.get("default") is None]
    if len(args) > len(names):
        qual = "exactly" if len(required) == len(names) else "at most"
        raise TypeError(f"{name}() takes {qual} {len(names)} positional argument{'s' * (len(names) != 1)} "
                        f"({len(args)} given)")
    bound = dict(zip(names, args))
    for key, value in kwargs.items():
        if key not in names:
            raise TypeError(f"{name}() got an unexpected keyword argument '{key}'")
        if key in bound:
            raise TypeError(f"{name}() got multiple values for argument '{key}'")
        bound[key] = value
    missing = [n for n in required if n not in bound]
    if missing:
        qual = "exactly" if len(required) == len(names) else "at least"
        raise TypeError(f"{name}() takes {qual} {len(required)} positional argument{'s' * (len(required) != 1)} "
                        f"({len(args)} given)")
    return bound


class Cudart:
    """The behaviour of the runtime calls mlit-edge makes, on one `Device`; each method takes the bound
    arguments by their recorded names."""

    def __init__(self, device: Device, err: type[enum.IntEnum], version: str) -> None:
        self.device, self.err, self.version = device, err, version
        self.ok = err.cudaSuccess

    def _fail(self, name: str):
        return getattr(self.err, name)

    def cudaGetDeviceCount(self, a):
        return self.ok, 1

    def cudaGetDeviceProperties(self, a):
        d = self.device
        return self.ok, SimpleNamespace(name=d.name.encode(), major=d.major, minor=d.minor)

    def cudaRuntimeGetVersion(self, a):
        # cuda-python's cudart is its own emulation over the driver API and answers its build constant
        # (11.8.2 cuda/_lib/ccudart/ccudart.pyx: `runtimeVersion[0] = m_global._CUDART_VERSION`), not the
        # CUDA the device has: 11080 on a JetPack 5.1 whose CUDA is 11.4
        major, minor = (int(x) for x in self.version.split(".")[:2])
        return self.ok, major * 1000 + minor * 10

    def cudaDriverGetVersion(self, a):
        return self.ok, self.device.runtime_version  # the driver's CUDA: the JetPack's

    def cudaMalloc(self, a):
        return self.ok, self.device.malloc(a["size"])

    def cudaMallocHost(self, a):
        return self.ok, self.device.malloc(a["size"])

    def cudaFree(self, a):
        return (self.ok,) if self.device.free(a["devPtr"]) else (self._fail("cudaErrorInvalidValue"),)

    def cudaFreeHost(self, a):
        return (self.ok,) if self.device.free(a["ptr"]) else (self._fail("cudaErrorInvalidValue"),)

    def _copy(self, a) -> Callable[[], bool]:
        kind = int(a["kind"])
        sides = {1: (a["dst"],), 2: (a["src"],), 3: (a["dst"], a["src"])}.get(kind, ())  # H2D, D2H, D2D
        return lambda: self.device.copy(a["dst"], a["src"], a["count"], sides)

    def cudaMemcpy(self, a):
        return (self.ok,) if self._copy(a)() else (self._fail("cudaErrorInvalidValue"),)

    def cudaMemcpyAsync(self, a):
        ok = self.device.enqueue(a["stream"], self._copy(a), "cudaMemcpyAsync")
        return (self.ok,) if ok else (self._fail("cudaErrorInvalidValue"),)

    def cudaStreamCreate(self, a):
        return self.ok, self.device.new_stream()

    def cudaStreamDestroy(self, a):
        self.device.streams.pop(int(a["stream"]), None)
        return (self.ok,)

    def cudaStreamSynchronize(self, a):
        return (self.ok,)

    def cudaEventCreate(self, a):
        return self.ok, SimpleNamespace(stamp=0.0)

    def cudaEventRecord(self, a):
        import time

        event = a["event"]
        self.device.enqueue(a["stream"], lambda: setattr(event, "stamp", time.perf_counter()) or True,
                            "cudaEventRecord")
        return (self.ok,)

    def cudaEventElapsedTime(self, a):
        return self.ok, max(0.0, (a["end"].stamp - a["start"].stamp) * 1e3)

    def cudaEventDestroy(self, a):
        return (self.ok,)

    def cudaStreamBeginCapture(self, a):
        stream = self.device.stream(a["stream"])
        stream.capturing, stream.invalidated, stream.recorded = True, False, []
        return (self.ok,)

    def cudaStreamEndCapture(self, a):
        stream = self.device.stream(a["stream"])
        stream.capturing = False
        if stream.invalidated:
            return self._fail("cudaErrorStreamCaptureInvalidated"), None
        return self.ok, Graph(list(stream.recorded))

    def cudaStreamIsCapturing(self, a):
        status = self.device.stream(a["stream"]).capturing
        return self.ok, status

    def _instantiate(self, a):
        graph = a["graph"]
        if not isinstance(graph, Graph):
            return self._fail("cudaErrorInvalidValue"), None
        return self.ok, Graph(list(graph.ops))

    cudaGraphInstantiate = cudaGraphInstantiateWithFlags = _instantiate

    def cudaGraphLaunch(self, a):
        ops = a["graphExec"].ops
        ok = self.device.enqueue(a["stream"], lambda: all(op() for op in ops), "cudaGraphLaunch")
        return (self.ok,) if ok else (self._fail("cudaErrorLaunchFailure"),)

    def cudaGetLastError(self, a):
        return (self.ok,)

    def cudaGraphDestroy(self, a):
        return (self.ok,)

    cudaGraphExecDestroy = cudaGraphDestroy


def _function(name: str, entry: dict, impl: Any) -> Callable:
    params = entry["params"]
    returns = entry.get("returns")

    def call(*args, **kwargs):
        bound = _bind(name, params, args, kwargs)
        if impl is None:
            raise NotImplementedError(f"stand-in cuda-python: {name} exists in this version but is not modelled")
        out = impl(bound)
        if returns is not None and len(out) < returns:  # the values CUDA would fill, that no caller here reads
            out = tuple(out) + (None,) * (returns - len(out))
        return out

    call.__name__ = call.__qualname__ = name
    return call


def make_module(version: str, device: Device, name: str = "cuda.cudart") -> types.ModuleType:
    """The runtime module of cuda-python `version`, backed by `device`."""
    api = spec(version)
    module = types.ModuleType(name)
    for enum_name, members in api["enums"].items():
        setattr(module, enum_name, enum.IntEnum(enum_name, {m: i for i, m in enumerate(members)}))
    err = getattr(module, "cudaError_t")
    if int(err.cudaSuccess) != 0:  # keep CUDA's numbering where it matters: success is 0
        err = enum.IntEnum("cudaError_t", {m: (0 if m == "cudaSuccess" else i + 1)
                                           for i, m in enumerate(api["enums"]["cudaError_t"])})
        module.cudaError_t = err
    kinds = api["enums"]["cudaMemcpyKind"]  # HostToHost 0, HostToDevice 1, DeviceToHost 2, DeviceToDevice 3
    module.cudaMemcpyKind = enum.IntEnum("cudaMemcpyKind", {m: _MEMCPY.get(m, 10 + i) for i, m in enumerate(kinds)})
    behaviour = Cudart(device, err, version)
    for fn, entry in api["functions"].items():
        impl = getattr(behaviour, fn, None) if not fn.startswith("_") else None
        setattr(module, fn, _function(fn, entry, impl))
    module.__stand_in__ = f"cuda-python {version}"
    return module


_MEMCPY = {"cudaMemcpyHostToHost": 0, "cudaMemcpyHostToDevice": 1, "cudaMemcpyDeviceToHost": 2,
           "cudaMemcpyDeviceToDevice": 3, "cudaMemcpyDefault": 4}
