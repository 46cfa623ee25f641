"""One loader for every artifact: `open_artifact(path) -> (runner, record)`.

Each format (artifacts.targets.FORMATS: its name and suffixes) gets its opener here: the only dispatch on file
suffixes in the project, and the opener of each format this floor runs. A checkpoint's opener needs torch, so the
stage that has torch hands it in (`open_artifact(..., openers={"torch": ...})`, as bench does); the
floor never names a module above it. Every opener reads the file once and verifies those bytes
against the sidecar before they are loaded, so what was checked is exactly what runs.
"""
from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Mapping, Tuple

from ..artifacts.schema import ArtifactRecord, check_onnxruntime, read_record
from ..artifacts.targets import FORMATS, Format
from .runners import OnnxRuntimeRunner, Runner
from ..base.messages import require_file

INPUT = "images"  # the graph input of every mlit-edge artifact
BATCH_PROFILE = (1, 8, 64)  # MIN, OPT, MAX batch of a dynamic-batch engine; also the batches bench times


@dataclass(frozen=True)
class RunnerOptions:
    """How to run an artifact; each backend takes the fields that concern it."""

    routing: bool = False  # expose each layer's expert indices (`runner.route_names`)
    threads: int | None = None
    providers: tuple[str, ...] | None = None  # ONNX Runtime execution providers
    ort_arena: bool = True
    ort_mem_pattern: bool = True  # ONNX Runtime's planned memory pattern (off in the Classifier: memory first)
    cuda_graph: bool = False
    device: str = "cpu"  # torch
    require_sidecar: bool = True  # False: an ONNX without one opens with an empty record (bench)
    force_device: bool = False  # run a plan built on another Jetson module of the same GPU (said as a warning)


def torch_available() -> bool:
    """Whether torch is installed: datasets and checkpoints need it, a device's runtime does not."""
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


def artifact_files(path: str | Path) -> list[Path]:
    """The files an artifact is made of: `path` and its format's companions (an OpenVINO IR's .bin)."""
    path = Path(path)
    return [path, *(path.with_suffix(s) for s in artifact_format(path).companions)]


def open_artifact(path: str | Path, options: RunnerOptions = RunnerOptions(), content: bytes | None = None,
                  openers: Mapping[str, "Opener"] | None = None) -> tuple[Runner, ArtifactRecord]:
    """The runner for `path` (not yet open: `with runner:`) and its verified sidecar record.

    `content`: the file's bytes when the caller already read them (read here otherwise). `openers`: the
    openers of formats this floor cannot open itself, by format name (bench hands in the checkpoint's).
    """
    path = Path(path)
    fmt = artifact_format(path)
    opener = (openers or {}).get(fmt.name) or OPENERS.get(fmt.name)
    if opener is None:
        raise ValueError(f"{path}: a {fmt.name} file is opened by the workstation's bench, not the runtime, "
                         "which runs .plan, .onnx and .xml artifacts (build one with mlit-edge build)")
    if content is None:
        content = require_file(path).read_bytes()
    return opener(path, content, options)


def open_onnx(path: Path, content: bytes, options: RunnerOptions) -> tuple[Runner, ArtifactRecord]:
    try:
        import onnxruntime
    except ImportError:  # the runtime's fallback is optional on a Jetson (TensorRT runs the .plan)
        raise RuntimeError(f"{path}: an .onnx artifact needs ONNX Runtime, which is not installed here: "
                           "pip install onnxruntime (or run the .plan with TensorRT)") from None

    from ..artifacts.graph_scan import check_graph, default_opset
    try:
        record = read_record(path, content=content)
    except FileNotFoundError:
        if options.require_sidecar:
            raise
        record = ArtifactRecord()
    check_onnxruntime(record, onnxruntime.__version__, path, default_opset(content))
    check_graph(content, path)
    runner = OnnxRuntimeRunner(path, threads=options.threads, providers=list(options.providers or []) or None,
                               expose_routing=options.routing, mem_arena=options.ort_arena, content=content,
                               mem_pattern=options.ort_mem_pattern,
                               session=record.ort_session)
    return runner, record


def open_plan(path: Path, content: bytes, options: RunnerOptions) -> tuple[Runner, ArtifactRecord]:
    from ..devices.trt_env import verify_plan
    from .trt_runner import TensorRTRunner

    record = verify_plan(path, content=content, force=options.force_device)  # its fields checked too
    return TensorRTRunner(path, cuda_graph=options.cuda_graph, verified=(content, record)), record


def open_openvino(path: Path, content: bytes, options: RunnerOptions) -> tuple[Runner, ArtifactRecord]:
    from .ov_runner import open_ir

    return open_ir(path, content, options.threads, options.routing)


Opener = Callable[[Path, bytes, RunnerOptions], Tuple[Runner, ArtifactRecord]]  # evaluated: typing's Tuple for 3.8

# each format's opener (artifacts.targets.FORMATS); a format without one is handed in by the stage that can open it
# (a checkpoint needs torch)
OPENERS: dict[str, Opener] = {"tensorrt": open_plan, "onnxruntime": open_onnx, "openvino": open_openvino}
