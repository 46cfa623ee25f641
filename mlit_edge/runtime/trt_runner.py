"""A `.plan` through TensorRT: buffers bound once per batch size, pinned host memory,
`execute_async_v3` on one stream, optionally replayed as a CUDA graph.

Needs `tensorrt` (or `tensorrt_rtx`) and cuda-python, both imported on `open`. It runs only on a
GPU, so it stays thin: everything it can share (verification, sidecars, batching) lives elsewhere.
"""
from __future__ import annotations

from pathlib import Path
from typing import Mapping

import numpy as np

from .runners import Runner
from .trt_env import deserialize, import_trt, load_engine


def _ck(result):
    """Unwrap a cuda-python call: raise on a non-zero status, return the value(s)."""
    err, *values = result if isinstance(result, tuple) else (result,)
    if int(err) != 0:
        raise RuntimeError(f"CUDA error {int(err)} ({err})")
    return values[0] if len(values) == 1 else tuple(values) if values else None


def _cudart():
    try:
        from cuda.bindings import runtime as cudart  # cuda-python >= 12.6
    except ImportError:
        try:
            from cuda import cudart  # older cuda-python, e.g. 12.2 for JetPack 6.0
        except ImportError:
            raise RuntimeError("the TensorRT runner needs cuda-python (pip install 'cuda-python>=12.2,<13')") from None
    return cudart


class TensorRTRunner(Runner):
    """A TensorRT engine. `verified` is (plan bytes, sidecar record) that `verify_plan` already passed
    (what `open_artifact` hands over); without it `open` reads and verifies the plan itself.
    After each `infer`, `last_gpu_ms` holds the engine's GPU compute time (CUDA events), apart from
    the copies that host latency includes. `cuda_graph` replays each bound batch size as a graph."""

    name = "tensorrt"

    def __init__(self, plan: str | Path, cuda_graph: bool = False, verified: tuple[bytes, dict] | None = None) -> None:
        super().__init__()
        self.plan, self.cuda_graph, self._verified = Path(plan), cuda_graph, verified
        self.engine = self.context = self.stream = None
        self.record: dict = verified[1] if verified else {}
        self._bufs: dict = {}
        self._batch = None
        self._graph = None

    def activate_impl(self) -> None:
        if self._verified is not None:
            content, self.record = self._verified
            self.engine = deserialize(content, self.record, self.plan)
            self._verified = None  # TensorRT holds the engine now; drop our copy of the bytes
        else:
            self.engine, self.record = load_engine(self.plan)
        self.trt = import_trt(self.record.get("target", "tensorrt"))
        self.cudart = cudart = _cudart()
        self.context = self.engine.create_execution_context()
        self.stream = _ck(cudart.cudaStreamCreate())
        self._events = (_ck(cudart.cudaEventCreate()), _ck(cudart.cudaEventCreate()))
        names = [self.engine.get_tensor_name(i) for i in range(self.engine.num_io_tensors)]
        mode = self.trt.TensorIOMode.INPUT
        self.input_names = [n for n in names if self.engine.get_tensor_mode(n) == mode]
        self.output_names = [n for n in names if self.engine.get_tensor_mode(n) != mode]
        self.route_names = [n for n in self.output_names if n != "logits"]
        self.output_shapes = {n: tuple(None if d < 0 else int(d) for d in self.engine.get_tensor_shape(n))
                              for n in self.output_names}
        shape = tuple(self.engine.get_tensor_shape(self.input_names[0]))
        self.input_shape = tuple(None if d < 0 else int(d) for d in shape)
        self.static_batch = self.input_shape[0]
        # activation memory the engine asks for (weights are in the plan size); TensorRT 10 renamed it
        size = self.engine.device_memory_size_v2 if hasattr(self.engine, "device_memory_size_v2") \
            else self.engine.device_memory_size
        self.device_memory_bytes = int(size)
        self.settings = {"cuda_graph": self.cuda_graph}

    def _free(self) -> None:
        cudart = self.cudart
        if self._graph is not None:
            _ck(cudart.cudaGraphExecDestroy(self._graph))
            self._graph = None
        for dptr, hptr, _ in self._bufs.values():
            _ck(cudart.cudaFree(dptr))
            _ck(cudart.cudaFreeHost(hptr))
        self._bufs = {}

    def _bind(self, batch: int) -> None:
        import ctypes

        cudart, trt = self.cudart, self.trt
        self._free()
        for name in self.input_names:
            shape = list(self.engine.get_tensor_shape(name))
            shape[0] = batch
            if not self.context.set_input_shape(name, shape):
                raise ValueError(f"batch {batch} is outside the engine's optimisation profile "
                                 f"{self.record.get('engine', {}).get('flags', {}).get('profile')}")
        for name in self.input_names + self.output_names:
            shape = tuple(self.context.get_tensor_shape(name))
            dtype = np.dtype(trt.nptype(self.engine.get_tensor_dtype(name)))
            nbytes = int(np.prod(shape)) * dtype.itemsize
            dptr = _ck(cudart.cudaMalloc(nbytes))
            hptr = _ck(cudart.cudaMallocHost(nbytes))  # pinned: async copies without a staging copy
            host = np.frombuffer((ctypes.c_byte * nbytes).from_address(hptr), dtype=dtype).reshape(shape)
            self.context.set_tensor_address(name, dptr)
            self._bufs[name] = (dptr, hptr, host)
        self._batch = batch
        if self.cuda_graph:
            self.context.execute_async_v3(self.stream)  # one plain run first: TensorRT may allocate lazily
            _ck(cudart.cudaStreamSynchronize(self.stream))
            _ck(cudart.cudaStreamBeginCapture(self.stream, cudart.cudaStreamCaptureMode.cudaStreamCaptureModeThreadLocal))
            self.context.execute_async_v3(self.stream)
            graph = _ck(cudart.cudaStreamEndCapture(self.stream))
            self._graph = _ck(cudart.cudaGraphInstantiate(graph, 0))
            _ck(cudart.cudaGraphDestroy(graph))

    def infer_impl(self, feed: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        cudart = self.cudart
        batch = len(next(iter(feed.values())))
        if batch != self._batch:
            self._bind(batch)
        h2d, d2h = cudart.cudaMemcpyKind.cudaMemcpyHostToDevice, cudart.cudaMemcpyKind.cudaMemcpyDeviceToHost
        for name in self.input_names:
            dptr, hptr, host = self._bufs[name]
            np.copyto(host, feed[name], casting="same_kind")
            _ck(cudart.cudaMemcpyAsync(dptr, hptr, host.nbytes, h2d, self.stream))
        start, stop = self._events
        _ck(cudart.cudaEventRecord(start, self.stream))
        if self._graph is not None:
            _ck(cudart.cudaGraphLaunch(self._graph, self.stream))
        elif not self.context.execute_async_v3(self.stream):
            raise RuntimeError("TensorRT execute_async_v3 failed")
        _ck(cudart.cudaEventRecord(stop, self.stream))
        for name in self.output_names:
            dptr, hptr, host = self._bufs[name]
            _ck(cudart.cudaMemcpyAsync(hptr, dptr, host.nbytes, d2h, self.stream))
        _ck(cudart.cudaStreamSynchronize(self.stream))
        self.last_gpu_ms = float(_ck(cudart.cudaEventElapsedTime(start, stop)))
        return {name: self._bufs[name][2].copy() for name in self.output_names}

    def deactivate_impl(self) -> None:
        self._free()
        for ev in self._events:
            self.cudart.cudaEventDestroy(ev)
        self.cudart.cudaStreamDestroy(self.stream)
        self.context = self.engine = None
