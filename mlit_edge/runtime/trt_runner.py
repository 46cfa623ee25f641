"""A `.plan` through TensorRT: buffers bound once per batch size, pinned host memory,
`execute_async_v3` on one stream, optionally replayed as a CUDA graph.

Needs `tensorrt` (or `tensorrt_rtx`) and cuda-python, both imported on `open`. It runs only on a
GPU, so it stays thin: everything it can share (verification, sidecars, batching) lives elsewhere.
"""
from __future__ import annotations

import ctypes
import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping

import numpy as np

from .runners import Runner
from ..artifacts.schema import ArtifactRecord
from ..devices.trt_env import deserialize, import_cudart, import_trt, load_engine

if TYPE_CHECKING:  # the API this module is type-checked against (tensorrt-stubs, tools/typecheck_trt.py)
    import tensorrt as trt

logger = logging.getLogger(__name__)


def cuda_check(result):
    """Unwrap a cuda-python call: raise on a non-zero status, return the value(s)."""
    err, *values = result if isinstance(result, tuple) else (result,)
    if int(err) != 0:
        raise RuntimeError(f"CUDA error {int(err)} ({err})")
    return values[0] if len(values) == 1 else tuple(values) if values else None


get_cudart = import_cudart  # the name the calibrator and gpu_check import (and tests replace)


# TensorRT's DataType names -> numpy. Not `tensorrt.nptype`: TensorRT 8.5's names `np.bool`, which numpy 1.24
# removed (release/8.5 python/packaging/tensorrt/__init__.py), so it works only under JetPack 5's numpy pin
NUMPY_TYPES = {"FLOAT": np.float32, "HALF": np.float16, "INT8": np.int8, "INT32": np.int32, "INT64": np.int64,
               "UINT8": np.uint8, "BOOL": np.bool_}


def numpy_dtype(trt_type) -> np.dtype:
    """The numpy dtype of a TensorRT `DataType` member (str() is "DataType.HALF")."""
    name = str(trt_type).rsplit(".", 1)[-1]
    if name not in NUMPY_TYPES:
        raise RuntimeError(f"the engine has a tensor of type {name}, which the runner does not bind")
    return np.dtype(NUMPY_TYPES[name])


class TensorRTRunner(Runner):
    """A TensorRT engine. `verified` is (plan bytes, sidecar record) that `verify_plan` already passed
    (what `open_artifact` hands over); without it `open` reads and verifies the plan itself.
    After each `infer`, `last_gpu_ms` holds the engine's GPU compute time (CUDA events), apart from
    the copies that host latency includes. `cuda_graph` replays each bound batch size as a graph."""

    name = "tensorrt"

    def __init__(self, plan: str | Path, cuda_graph: bool = False,
                 verified: tuple[bytes, ArtifactRecord] | None = None) -> None:
        super().__init__()
        self.plan, self.cuda_graph, self._verified = Path(plan), cuda_graph, verified
        self.engine: trt.ICudaEngine | None = None
        self.context: trt.IExecutionContext | None = None
        self.stream: Any = None  # cuda-python's cudaStream_t
        self.record = verified[1] if verified else ArtifactRecord()
        self._bufs: dict = {}
        self._dtypes: dict[str, np.dtype] = {}
        self._batch: int | None = None
        self._graph: Any = None

    def _live(self) -> tuple[trt.ICudaEngine, trt.IExecutionContext]:
        if self.engine is None or self.context is None:
            raise RuntimeError(f"{self.plan.name}: the TensorRT runner is not open")
        return self.engine, self.context

    def activate_impl(self) -> None:
        if self._verified is not None:
            content, self.record = self._verified
            engine = deserialize(content, self.record, self.plan)
            self._verified = None  # TensorRT holds the engine now; drop our copy of the bytes
        else:
            engine, self.record = load_engine(self.plan)
        if TYPE_CHECKING:
            import tensorrt as api
        else:  # at run time, the module the plan was built with (tensorrt or tensorrt_rtx)
            api = import_trt(self.record.target or "tensorrt")
        self.cudart = cudart = get_cudart()
        self.engine, self.context = engine, engine.create_execution_context()
        self.stream = cuda_check(cudart.cudaStreamCreate())
        self._events = (cuda_check(cudart.cudaEventCreate()), cuda_check(cudart.cudaEventCreate()))
        names = [engine.get_tensor_name(i) for i in range(engine.num_io_tensors)]
        mode = api.TensorIOMode.INPUT
        self.input_names = [n for n in names if engine.get_tensor_mode(n) == mode]
        self.output_names = [n for n in names if engine.get_tensor_mode(n) != mode]
        self.route_names = [n for n in self.output_names if n != "logits"]
        self._dtypes = {n: numpy_dtype(engine.get_tensor_dtype(n)) for n in names}
        self.output_shapes = {n: tuple(None if d < 0 else int(d) for d in engine.get_tensor_shape(n)[:])
                              for n in self.output_names}
        shape = engine.get_tensor_shape(self.input_names[0])[:]
        self.input_shape = tuple(None if d < 0 else int(d) for d in shape)
        self.static_batch = self.input_shape[0]
        rec = self.record
        if self.static_batch is None and rec.max_batch is not None and rec.min_batch == rec.max_batch:
            self.static_batch = int(rec.max_batch)  # a dynamic-batch graph built static (--batch N): one size
        self.input_dtype = self._dtypes[self.input_names[0]].name
        # activation memory the engine asks for (weights are in the plan size); TensorRT 10 renamed it
        size = engine.device_memory_size_v2 if hasattr(engine, "device_memory_size_v2") \
            else engine.device_memory_size
        self.device_memory_bytes = int(size)
        self.settings = {"cuda_graph": self.cuda_graph}

    def _free(self) -> None:
        cudart = self.cudart
        if self._graph is not None:
            cuda_check(cudart.cudaGraphExecDestroy(self._graph))
            self._graph = None
        for dptr, hptr, _ in self._bufs.values():
            cuda_check(cudart.cudaFree(dptr))
            cuda_check(cudart.cudaFreeHost(hptr))
        self._bufs = {}

    def _bind(self, batch: int) -> None:
        cudart = self.cudart
        engine, context = self._live()
        self._free()
        for name in self.input_names:
            wanted = list(engine.get_tensor_shape(name)[:])
            wanted[0] = batch
            if not context.set_input_shape(name, wanted):
                raise ValueError(f"batch {batch} is outside the engine's optimisation profile "
                                 f"{self.record.batch_profile}")
        for name in self.input_names + self.output_names:
            shape = context.get_tensor_shape(name)[:]
            dtype = self._dtypes[name]
            nbytes = int(np.prod(shape)) * dtype.itemsize
            dptr = cuda_check(cudart.cudaMalloc(nbytes))
            hptr = cuda_check(cudart.cudaMallocHost(nbytes))  # pinned: async copies without a staging copy
            host = np.frombuffer(memoryview((ctypes.c_byte * nbytes).from_address(hptr)), dtype=dtype).reshape(shape)
            context.set_tensor_address(name, dptr)
            self._bufs[name] = (dptr, hptr, host)
        self._batch = batch
        if self.cuda_graph:
            self._graph = self._capture()

    def _capture(self):
        """The bound batch as an instantiated CUDA graph, or None (with one notice line) when the engine's
        enqueue cannot be captured, as trtexec does (NVIDIA/TensorRT release/8.5 and release/10.3
        samples/common/sampleInference.cpp: a failed capture falls back to plain enqueue). A DLA engine is the
        known case (NVIDIA/TensorRT#3524, Orin, 8.5.2.2)."""
        cudart = self.cudart
        context = self._live()[1]
        if not context.execute_async_v3(int(self.stream)):  # one plain run first: TensorRT may allocate lazily
            raise RuntimeError("TensorRT execute_async_v3 failed")
        cuda_check(cudart.cudaStreamSynchronize(self.stream))
        thread_local = cudart.cudaStreamCaptureMode.cudaStreamCaptureModeThreadLocal
        cuda_check(cudart.cudaStreamBeginCapture(self.stream, thread_local))
        enqueued = context.execute_async_v3(int(self.stream))
        err, graph = cudart.cudaStreamEndCapture(self.stream)  # always ends the capture, whatever happened in it
        if not enqueued or int(err) != 0 or graph is None:
            cudart.cudaGetLastError()  # clear the capture's error so the plain enqueue starts clean
            logger.warning(f"notice: {self.plan.name}: this engine's enqueue cannot be captured as a CUDA graph "
                           f"({'the enqueue failed' if not enqueued else err}); running it without one")
            self.settings["cuda_graph"] = False
            self.cuda_graph = False
            return None
        # cudaGraphInstantiateWithFlags(graph, flags) has this one signature in every cuda-python a JetPack pins
        # (11.8.2, 12.2.1, 12.6.2, 13.0.3; tests/standins/data/cuda_python.json), whereas cudaGraphInstantiate
        # is (graph, pLogBuffer, bufferSize) in 11.8.2 and (graph, flags) from 12.0
        instance = cuda_check(cudart.cudaGraphInstantiateWithFlags(graph, 0))
        cuda_check(cudart.cudaGraphDestroy(graph))
        return instance

    def infer_impl(self, feed: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        cudart = self.cudart
        batch = len(next(iter(feed.values())))
        if batch != self._batch:
            self._bind(batch)
        h2d, d2h = cudart.cudaMemcpyKind.cudaMemcpyHostToDevice, cudart.cudaMemcpyKind.cudaMemcpyDeviceToHost
        for name in self.input_names:
            dptr, hptr, host = self._bufs[name]
            np.copyto(host, feed[name], casting="same_kind")
            cuda_check(cudart.cudaMemcpyAsync(dptr, hptr, host.nbytes, h2d, self.stream))
        start, stop = self._events
        cuda_check(cudart.cudaEventRecord(start, self.stream))
        if self._graph is not None:
            cuda_check(cudart.cudaGraphLaunch(self._graph, self.stream))
        elif not self._live()[1].execute_async_v3(int(self.stream)):
            raise RuntimeError("TensorRT execute_async_v3 failed")
        cuda_check(cudart.cudaEventRecord(stop, self.stream))
        for name in self.output_names:
            dptr, hptr, host = self._bufs[name]
            cuda_check(cudart.cudaMemcpyAsync(hptr, dptr, host.nbytes, d2h, self.stream))
        cuda_check(cudart.cudaStreamSynchronize(self.stream))
        self.last_gpu_ms = float(cuda_check(cudart.cudaEventElapsedTime(start, stop)))
        return {name: self._bufs[name][2].copy() for name in self.output_names}

    def deactivate_impl(self) -> None:
        self._free()
        for ev in self._events:
            self.cudart.cudaEventDestroy(ev)
        self.cudart.cudaStreamDestroy(self.stream)
        self.context = self.engine = None
