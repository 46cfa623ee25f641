"""One loader for every artifact: `open_artifact(path) -> (runner, record)`.

The formats live in one table keyed by name. It holds the only dispatch on file suffixes in the
project, and each format's opener, which is imported only when a file of that format is opened,
so this floor stays torch-free: a checkpoint's opener (it needs torch) lives in the export stage.
Every opener reads the file once and verifies those bytes against the sidecar before they are
loaded, so what was checked is exactly what runs.
"""
from __future__ import annotations

from dataclasses import dataclass
from importlib import import_module
from pathlib import Path

from .runners import Runner

INPUT = "images"  # the graph input of every mlit-edge artifact
BATCH_PROFILE = (1, 8, 64)  # MIN, OPT, MAX batch of a dynamic-batch engine; also the batches bench times


@dataclass(frozen=True)
class Format:
    """An artifact format: its runtime's name, its file suffixes and where its opener lives."""

    name: str
    suffixes: tuple[str, ...]
    opener: str  # "module:function", imported on first use


FORMATS: dict[str, Format] = {
    "tensorrt": Format("tensorrt", (".plan", ".engine", ".trt"), "mlit_edge.runtime.artifact:open_plan"),
    "onnxruntime": Format("onnxruntime", (".onnx",), "mlit_edge.runtime.artifact:open_onnx"),
    "torch": Format("torch", (".pt", ".pth"), "mlit_edge.export.torch_runner:open_checkpoint"),
}


@dataclass(frozen=True)
class RunnerOptions:
    """How to run an artifact; each backend takes the fields that concern it."""

    routing: bool = False  # expose each layer's expert indices (`runner.route_names`)
    threads: int | None = None
    providers: tuple[str, ...] | None = None  # ONNX Runtime execution providers
    ort_arena: bool = True
    cuda_graph: bool = False
    device: str = "cpu"  # torch
    require_sidecar: bool = True  # False: an ONNX without one opens with an empty record (bench)


def torch_available() -> bool:
    """Whether torch is installed: datasets and checkpoints need it, a device's runtime does not."""
    import importlib.util

    try:
        return importlib.util.find_spec("torch") is not None
    except (ImportError, ValueError):
        return False


def artifact_format(path: str | Path) -> Format:
    """The format of `path` by its suffix; a one-line error for anything else."""
    suffix = Path(path).suffix.lower()
    for fmt in FORMATS.values():
        if suffix in fmt.suffixes:
            return fmt
    known = ", ".join(s for f in FORMATS.values() for s in f.suffixes)
    raise ValueError(f"{path}: unknown artifact type {suffix or '(none)'}; expected one of {known}")


def open_artifact(path: str | Path, options: RunnerOptions = RunnerOptions(),
                  content: bytes | None = None) -> tuple[Runner, dict]:
    """The runner for `path` (not yet open: `with runner:`) and its verified sidecar record.

    `content`: the file's bytes when the caller already read them (read here otherwise).
    """
    path = Path(path)
    fmt = artifact_format(path)
    if content is None:
        if not path.is_file():
            raise FileNotFoundError(f"{path} does not exist")
        content = path.read_bytes()
    module, func = fmt.opener.split(":")
    return getattr(import_module(module), func)(path, content, options)


def open_onnx(path: Path, content: bytes, options: RunnerOptions) -> tuple[Runner, dict]:
    from .runners import OnnxRuntimeRunner
    from .schema import check_record
    from .sidecar import read_sidecar

    try:
        record = read_sidecar(path, content=content)
    except FileNotFoundError:
        if options.require_sidecar:
            raise
        record = {}
    check_record(record, path)
    runner = OnnxRuntimeRunner(path, threads=options.threads, providers=list(options.providers or []) or None,
                               expose_routing=options.routing, mem_arena=options.ort_arena, content=content,
                               session=(record.get("onnxruntime") or {}).get("session"))
    return runner, record


def open_plan(path: Path, content: bytes, options: RunnerOptions) -> tuple[Runner, dict]:
    from .schema import check_record
    from .trt_env import verify_plan
    from .trt_runner import TensorRTRunner

    record = verify_plan(path, content=content)
    check_record(record, path)
    return TensorRTRunner(path, cuda_graph=options.cuda_graph, verified=(content, record)), record
