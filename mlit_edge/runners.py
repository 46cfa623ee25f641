"""Backends behind one interface: `with Runner(...) as r: outputs = r.infer({"images": x})`.

Parity and bench code only ever see `Runner`. Inputs and outputs are numpy arrays keyed by name, so
a runner needs no torch unless it is the torch one. Heavy backends are imported when a runner opens.
"""
from __future__ import annotations

from pathlib import Path
from typing import Mapping

import numpy as np


class Runner:
    """Base class: open on `__enter__`, release on `__exit__`, run with `infer`."""

    name = "runner"

    def __enter__(self) -> "Runner":
        self.open()
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def open(self) -> None:  # noqa: D401 - backends override
        """Load the model."""

    def close(self) -> None:
        """Release the model."""

    @property
    def output_names(self) -> list[str]:
        raise NotImplementedError

    def infer(self, feed: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        raise NotImplementedError


class TorchRunner(Runner):
    """A torch module (the reference, or its `to_deploy` form) on CPU or CUDA."""

    name = "torch"

    def __init__(self, module, output_names: list[str], device: str = "cpu", threads: int | None = None) -> None:
        self.module, self._outputs, self.device, self.threads = module, output_names, device, threads

    def open(self) -> None:
        import torch

        if self.threads:
            torch.set_num_threads(self.threads)
        self.module = self.module.to(self.device).eval()

    @property
    def output_names(self) -> list[str]:
        return self._outputs

    def infer(self, feed: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        import torch

        (x,) = feed.values()
        with torch.inference_mode():
            out = self.module(torch.from_numpy(np.ascontiguousarray(x)).to(self.device))
        outs = out if isinstance(out, (tuple, list)) else (out,)
        return {n: o.detach().cpu().numpy() for n, o in zip(self._outputs, outs)}


class OnnxRuntimeRunner(Runner):
    """An ONNX file through ONNX Runtime (CPU by default; CUDA/TensorRT providers where installed).

    `mem_arena=False` turns off ONNX Runtime's CPU memory arena, for memory-tight devices.
    """

    name = "onnxruntime"

    def __init__(self, path: str | Path, threads: int | None = None, providers: list[str] | None = None,
                 expose_routing: bool = False, mem_arena: bool = True, content: bytes | None = None) -> None:
        self.path, self.threads, self.providers = Path(path), threads, providers
        self.expose_routing, self.mem_arena = expose_routing, mem_arena
        self._content = content  # the file's bytes, already verified by the caller: loaded instead of the path
        self.route_names: list[str] = []
        self.route_experts: list[int | None] = []
        self.session = None
        self._outputs: list[str] = []

    def open(self) -> None:
        import onnxruntime as ort

        opts = ort.SessionOptions()
        if self.threads:
            opts.intra_op_num_threads = self.threads
        # the CPU arena keeps what the largest batch needed; without it memory goes back after each call,
        # which costs some latency on large batches (README, "Bench")
        opts.enable_cpu_mem_arena = self.mem_arena
        opts.log_severity_level = 3
        available = ort.get_available_providers()
        providers = [p for p in (self.providers or ["CPUExecutionProvider"]) if p in available]
        if not providers:
            raise RuntimeError(f"none of the providers {self.providers} is available (have {available})")
        model = self._content if self._content is not None else str(self.path)
        self._content = None  # the session holds its own copy
        if self.expose_routing:
            proto, self.route_names, self.route_experts = with_routing_outputs(model)
            model = proto.SerializeToString()
        try:
            self.session = ort.InferenceSession(model, opts, providers=providers)
        except Exception as e:  # ORT raises its own exception types for bad files
            raise ValueError(f"ONNX Runtime cannot load {self.path}: {str(e).splitlines()[0][:300]}") from None
        self._outputs = [o.name for o in self.session.get_outputs()]  # fixed per session; infer is the hot path

    def close(self) -> None:
        self.session = None

    @property
    def input_name(self) -> str:
        return self.session.get_inputs()[0].name

    @property
    def output_names(self) -> list[str]:
        return self._outputs

    def infer(self, feed: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        return dict(zip(self._outputs, self.session.run(self._outputs, dict(feed))))


def with_routing_outputs(src: str | Path | bytes):
    """The ONNX model (a path or its bytes) with every TopK's indices added as graph outputs (routing
    recovered from the graph itself), their names, and each TopK's expert count (None where shape
    inference cannot tell)."""
    import onnx

    model = onnx.load_from_string(src) if isinstance(src, bytes) else onnx.load(str(src))
    inferred = onnx.shape_inference.infer_shapes(model)
    shapes = {vi.name: [d.dim_value if d.HasField("dim_value") else None for d in vi.type.tensor_type.shape.dim]
              for vi in inferred.graph.value_info}
    outputs = {o.name for o in model.graph.output}
    names, experts = [], []
    for node in model.graph.node:
        if node.op_type == "TopK":
            names.append(node.output[1])
            experts.append((shapes.get(node.input[0]) or [None])[-1])
            if node.output[1] not in outputs:
                model.graph.output.append(onnx.helper.make_tensor_value_info(node.output[1], onnx.TensorProto.INT64,
                                                                             None))
    return model, names, experts


def input_name(runner: Runner) -> str:
    return getattr(runner, "input_name", None) or (runner.inputs[0] if hasattr(runner, "inputs") else "images")


def static_batch(runner: Runner) -> int | None:
    """The fixed batch size of an open ONNX Runtime graph; None when dynamic (or not ONNX Runtime)."""
    if isinstance(runner, OnnxRuntimeRunner) and runner.session is not None:
        b = runner.session.get_inputs()[0].shape[0]
        return b if isinstance(b, int) else None
    return None


def predict_all(runner: Runner, images: np.ndarray, batch: int = 64, routes: bool = False,
                fixed: int | None = None) -> tuple[np.ndarray, list[np.ndarray] | None]:
    """Logits, and with `routes` each layer's (N, tokens, k) expert indices, for all `images`.

    Runs in chunks of `batch`, or of the graph's fixed batch (`fixed`, else read from an ONNX
    graph), zero-padding the last chunk; padded rows never reach the results.
    """
    fixed = fixed or static_batch(runner)
    step = fixed or batch
    name = input_name(runner)
    logits, per_layer = [], None
    for i in range(0, len(images), step):
        x = images[i:i + step]
        n = len(x)
        if fixed and n < fixed:
            x = np.concatenate([x, np.zeros((fixed - n, *x.shape[1:]), x.dtype)])
        out = runner.infer({name: x})
        logits.append(out["logits"][:n])
        if routes:
            keys = getattr(runner, "route_names", None) or [k for k in out if k != "logits"]
            layer_out = [out[k].reshape(len(x), -1, out[k].shape[-1])[:n] for k in keys]
            per_layer = [[] for _ in layer_out] if per_layer is None else per_layer
            for acc, r in zip(per_layer, layer_out):
                acc.append(r)
    return np.concatenate(logits), ([np.concatenate(r) for r in per_layer] if per_layer else None)


def _ck(result):
    """Unwrap a cuda-python call: raise on a non-zero status, return the value(s)."""
    err, *values = result if isinstance(result, tuple) else (result,)
    if int(err) != 0:
        raise RuntimeError(f"CUDA error {int(err)} ({err})")
    return values[0] if len(values) == 1 else tuple(values) if values else None


class TensorRTRunner(Runner):
    """A `.plan` through TensorRT: buffers bound once per batch size, pinned host memory,
    `execute_async_v3` on one stream, optionally replayed as a CUDA graph.

    `load_engine` checks the plan (sha256, TensorRT version, GPU) before anything is deserialized.
    After each `infer`, `last_gpu_ms` holds the GPU compute time of the engine alone (CUDA events),
    apart from the copies that host latency includes. Needs `tensorrt` (or `tensorrt_rtx`) and
    cuda-python.
    """

    name = "tensorrt"

    def __init__(self, plan: str | Path, cuda_graph: bool = False) -> None:
        self.plan, self.cuda_graph = Path(plan), cuda_graph
        self.engine = self.context = self.stream = None
        self.record: dict = {}
        self._bufs: dict = {}
        self._batch = None
        self._graph = None
        self.last_gpu_ms: float | None = None

    def open(self) -> None:
        from .engine import import_trt, load_engine

        self.engine, self.record = load_engine(self.plan)
        self.trt = import_trt(self.record.get("target", "tensorrt"))
        try:
            from cuda.bindings import runtime as cudart  # cuda-python >= 12.6
        except ImportError:
            try:
                from cuda import cudart  # older cuda-python, e.g. 12.2 for JetPack 6.0
            except ImportError:
                raise RuntimeError("the TensorRT runner needs cuda-python (pip install 'cuda-python>=12.2,<13')") \
                    from None
        self.cudart = cudart
        self.context = self.engine.create_execution_context()
        self.stream = _ck(cudart.cudaStreamCreate())
        self._events = (_ck(cudart.cudaEventCreate()), _ck(cudart.cudaEventCreate()))
        names = [self.engine.get_tensor_name(i) for i in range(self.engine.num_io_tensors)]
        mode = self.trt.TensorIOMode.INPUT
        self.inputs = [n for n in names if self.engine.get_tensor_mode(n) == mode]
        self._outputs = [n for n in names if self.engine.get_tensor_mode(n) != mode]

    @property
    def output_names(self) -> list[str]:
        return self._outputs

    @property
    def device_memory_bytes(self) -> int:
        """Activation memory the engine asks for (weights are in the plan size)."""
        for attr in ("device_memory_size_v2", "device_memory_size"):
            if hasattr(self.engine, attr):
                return int(getattr(self.engine, attr))
        return 0

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
        for name in self.inputs:
            shape = list(self.engine.get_tensor_shape(name))
            shape[0] = batch
            if not self.context.set_input_shape(name, shape):
                raise ValueError(f"batch {batch} is outside the engine's optimisation profile "
                                 f"{self.record.get('engine', {}).get('flags', {}).get('profile')}")
        for name in self.inputs + self._outputs:
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

    def infer(self, feed: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        cudart = self.cudart
        batch = len(next(iter(feed.values())))
        if batch != self._batch:
            self._bind(batch)
        h2d, d2h = cudart.cudaMemcpyKind.cudaMemcpyHostToDevice, cudart.cudaMemcpyKind.cudaMemcpyDeviceToHost
        for name in self.inputs:
            dptr, hptr, host = self._bufs[name]
            np.copyto(host, feed[name] if name in feed else next(iter(feed.values())), casting="same_kind")
            _ck(cudart.cudaMemcpyAsync(dptr, hptr, host.nbytes, h2d, self.stream))
        start, stop = self._events
        _ck(cudart.cudaEventRecord(start, self.stream))
        if self._graph is not None:
            _ck(cudart.cudaGraphLaunch(self._graph, self.stream))
        elif not self.context.execute_async_v3(self.stream):
            raise RuntimeError("TensorRT execute_async_v3 failed")
        _ck(cudart.cudaEventRecord(stop, self.stream))
        for name in self._outputs:
            dptr, hptr, host = self._bufs[name]
            _ck(cudart.cudaMemcpyAsync(hptr, dptr, host.nbytes, d2h, self.stream))
        _ck(cudart.cudaStreamSynchronize(self.stream))
        self.last_gpu_ms = float(_ck(cudart.cudaEventElapsedTime(start, stop)))
        return {name: self._bufs[name][2].copy() for name in self._outputs}

    def close(self) -> None:
        if self.context is None:
            return
        self._free()
        for ev in self._events:
            self.cudart.cudaEventDestroy(ev)
        self.cudart.cudaStreamDestroy(self.stream)
        self.context = self.engine = None
