"""Backends behind one contract, in the spirit of Polygraphy's `BaseRunner`.

    with runner:                       # open() / close()
        outputs = runner.infer({"images": x})

The base class carries the whole contract, so no caller asks a backend what it is: the input names
and shape, the fixed batch (None when dynamic), which outputs carry routing, the GPU time of the
last call (None where there is none), the settings the backend really applied, and whether it is
open. Inputs and outputs are numpy arrays keyed by name. Heavy backends are imported on `open`.
"""
from __future__ import annotations

from pathlib import Path
from typing import Callable, Mapping, Sequence

import numpy as np

from .images import InputError
from ..artifacts.input_convention import graph_feed
from ..base.messages import first_line, typed_line
from ..base.values import check_threads, default_threads


class RunnerClosedError(RuntimeError):
    """`infer` on a runner that is not open."""


class Runner:
    """Base class: `open` loads, `close` releases, `infer` runs. Subclasses fill in the contract
    fields in `activate_impl` and implement `infer_impl`."""

    name = "runner"

    def __init__(self) -> None:
        self.is_active = False
        self.input_names: list[str] = []
        self.input_shape: tuple[int | None, ...] = ()  # of the first input; the batch is None when dynamic
        self.input_dtype: str | None = None  # of the first input, as numpy names it; None if unknown
        self.output_names: list[str] = []
        self.output_shapes: dict[str, tuple[int | None, ...]] = {}  # None for a free dimension; {} if unknown
        self.route_names: list[str] = []  # outputs holding each layer's (.., K) expert indices
        self.static_batch: int | None = None
        self.last_gpu_ms: float | None = None  # GPU compute time of the last infer, where measurable
        self.device_memory_bytes: int | None = None  # GPU memory the backend holds; None on the CPU
        self.settings: dict = {}  # what the backend applied (threads, arena, optimisation level, ...)

    def __enter__(self) -> "Runner":
        self.open()
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def open(self) -> None:
        if not self.is_active:
            self.activate_impl()
            self.is_active = True

    def close(self) -> None:
        if self.is_active:
            self.deactivate_impl()
            self.is_active = False

    def infer(self, feed: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        if not self.is_active:
            raise RunnerClosedError(f"the {self.name} runner is closed; open it (or use it in a `with` block)")
        return self.infer_impl(feed)

    @property
    def input_name(self) -> str:
        return self.input_names[0]

    def activate_impl(self) -> None:
        """Load the model and fill in the contract fields."""

    def deactivate_impl(self) -> None:
        """Release the model."""

    def infer_impl(self, feed: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        raise NotImplementedError


class OnnxRuntimeRunner(Runner):
    """An ONNX model through ONNX Runtime (CPU by default; CUDA/TensorRT providers where installed).

    `content` is the file's bytes, already verified by the caller, loaded instead of the path (or the
    parsed model, when the caller holds it).
    `expose_routing` adds every TopK's indices as outputs (`route_names`). `session` holds the
    session options an artifact's sidecar recorded for ONNX Runtime (`graph_optimization_level`,
    `threads`); `threads` and `mem_arena` given here win.
    """

    name = "onnxruntime"

    def __init__(self, path: str | Path, threads: int | None = None, providers: list[str] | None = None,
                 expose_routing: bool = False, mem_arena: bool = True, content: bytes | None = None,
                 session: Mapping | None = None, mem_pattern: bool = True) -> None:
        super().__init__()
        self.path, self.threads, self.providers = Path(path), threads, providers
        self.expose_routing, self.mem_arena, self.mem_pattern = expose_routing, mem_arena, mem_pattern
        self.session_options = dict(session or {})
        self._content = content
        self._session = None
        self.route_experts: list[int | None] = []

    def activate_impl(self) -> None:
        import onnxruntime as ort

        opts = ort.SessionOptions()
        threads = self.threads or self.session_options.get("threads")
        check_threads(threads, "threads")
        threads = threads or default_threads()
        if threads:
            opts.intra_op_num_threads = int(threads)
        # the CPU arena keeps what the largest batch needed; without it memory goes back after each
        # call, at some latency on large batches (docs/bench.md)
        opts.enable_cpu_mem_arena = self.mem_arena
        # the memory pattern ORT plans after a first run is allocated beside what that run left in the
        # arena: about 95 MB more for XXS at batch 64, at no measured speed (docs/runtime.md)
        opts.enable_mem_pattern = self.mem_pattern
        level = self.session_options.get("graph_optimization_level", "all")
        opts.graph_optimization_level = graph_level(ort, level)
        opts.log_severity_level = 4  # fatal only: what fails (at load or run) is raised as one line of ours
        available = ort.get_available_providers()
        providers = [p for p in (self.providers or ["CPUExecutionProvider"]) if p in available]
        if not providers:
            raise RuntimeError(f"none of the providers {self.providers} is available (have {available})")
        model = self._content if self._content is not None else str(self.path)
        if self.expose_routing:
            proto, self.route_names, self.route_experts = with_routing_outputs(model)
            model = proto.SerializeToString()
        elif not isinstance(model, (str, bytes)):  # a parsed model
            model = model.SerializeToString()
        try:
            self._session = ort.InferenceSession(model, opts, providers=providers)
        except Exception as e:  # ONNX Runtime raises its own exception types for bad files
            raise ValueError(f"ONNX Runtime cannot load {self.path}: {first_line(e, 300)}") from None
        first = self._session.get_inputs()[0]
        self.input_names = [i.name for i in self._session.get_inputs()]
        self.input_shape = tuple(d if isinstance(d, int) else None for d in first.shape)
        self.static_batch = self.input_shape[0] if self.input_shape else None
        self.input_dtype = ORT_TYPES.get(first.type, first.type)
        self.output_names = [o.name for o in self._session.get_outputs()]  # fixed per session: infer is hot
        self.output_shapes = {o.name: tuple(d if isinstance(d, int) else None for d in o.shape)
                              for o in self._session.get_outputs()}
        if not self.expose_routing:  # a probe export's own routing outputs
            self.route_names = [n for n in self.output_names if n != "logits"]
        applied = self._session.get_session_options()
        self.settings = {"providers": self._session.get_providers(), "threads": applied.intra_op_num_threads or None,
                         "cpu_mem_arena": bool(applied.enable_cpu_mem_arena), "mem_pattern": bool(applied.enable_mem_pattern),
                         "graph_optimization_level": level}

    def deactivate_impl(self) -> None:
        self._session = None

    def infer_impl(self, feed: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        try:
            outputs = self._session.run(self.output_names, dict(feed))
        except Exception as e:  # ONNX Runtime's own types (Fail: a graph that asks for 32 GB) are no RuntimeError
            raise InputError(f"ONNX Runtime cannot run {self.path.name}: {first_line(e, 300)}") from None
        return dict(zip(self.output_names, outputs))


# ONNX Runtime's element type names -> numpy's, for the types a classifier's input could be declared as
ORT_TYPES = {"tensor(float)": "float32", "tensor(float16)": "float16", "tensor(double)": "float64",
             "tensor(uint8)": "uint8", "tensor(int8)": "int8", "tensor(int32)": "int32", "tensor(int64)": "int64"}
GRAPH_LEVELS = {"disabled": "ORT_DISABLE_ALL", "basic": "ORT_ENABLE_BASIC", "extended": "ORT_ENABLE_EXTENDED",
                "all": "ORT_ENABLE_ALL"}  # the names sidecars record -> ONNX Runtime's enum members


def graph_level(ort, name: str):
    """ONNX Runtime's graph optimisation level for the name a sidecar records."""
    if not isinstance(name, str) or name not in GRAPH_LEVELS:  # a list is no key ("unhashable type")
        raise ValueError(f"unknown ONNX Runtime graph optimisation level {name!r}: use one of "
                         f"{', '.join(GRAPH_LEVELS)}")
    return getattr(ort.GraphOptimizationLevel, GRAPH_LEVELS[name])


def load_onnx(src, load_external_data: bool = True):
    """An ONNX model from a path, its bytes, or a parsed model (copied, not parsed again); a one-line
    ValueError for anything onnx cannot load (not ONNX, truncated, external data that is missing or
    points outside the model's folder)."""
    import onnx

    if isinstance(src, onnx.ModelProto):
        copy = onnx.ModelProto()
        copy.CopyFrom(src)
        return copy
    try:
        if isinstance(src, bytes):
            return onnx.load_from_string(src)
        return onnx.load(str(src), load_external_data=load_external_data)
    except Exception as e:  # onnx raises DecodeError, ValidationError, OSError... for bad files
        name = "the ONNX bytes" if isinstance(src, bytes) else str(src)
        raise ValueError(f"{name} is not a loadable ONNX model ({typed_line(e, 200)})") from None


def with_routing_outputs(src):
    """The ONNX model (a path, its bytes or a parsed model) with every TopK's indices added as graph outputs (routing
    recovered from the graph itself), their names, and each TopK's expert count (None where shape
    inference cannot tell)."""
    import onnx

    model = load_onnx(src)
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


def predict_all(runner: Runner, images: np.ndarray, batch: int = 64, routes: bool = False,
                normalised: "tuple[Sequence[float], Sequence[float]] | None" = None,
                done: "Callable[[int], None] | None" = None) -> tuple[np.ndarray, list[np.ndarray] | None]:
    """Logits, and with `routes` each layer's (N, tokens, k) expert indices, for all `images`.

    Runs in chunks of `batch`, or of the runner's fixed batch, zero-padding the last chunk; padded
    rows never reach the results. `normalised=(mean, std)`: `images` are decoded images normalised with
    them (a data set's), fed in the convention the graph's input names (`input_convention.graph_feed`);
    None: `images` are the graph's input as they are. `done(n)` is told the images of each chunk as it ends
    (a progress bar's count).
    """
    fixed = runner.static_batch
    step = fixed or batch
    logits, per_layer = [], [[] for _ in runner.route_names] if routes else None
    for i in range(0, len(images), step):
        x = images[i:i + step]
        n = len(x)
        if normalised is not None:
            x = graph_feed(runner.input_name, x, *normalised, runner.input_dtype)
        if fixed and n < fixed:
            x = np.concatenate([x, np.zeros((fixed - n, *x.shape[1:]), x.dtype)])
        out = runner.infer({runner.input_name: x})
        logits.append(out["logits"][:n])
        if routes:
            for acc, name in zip(per_layer, runner.route_names):
                acc.append(out[name].reshape(len(x), -1, out[name].shape[-1])[:n])
        if done is not None:
            done(n)
    return np.concatenate(logits), ([np.concatenate(r) for r in per_layer] if routes else None)
