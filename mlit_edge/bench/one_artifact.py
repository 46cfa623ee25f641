"""One artifact's bench: open it, time each batch, then its accuracy and fidelity against the reference."""
from __future__ import annotations

import gc
import json
import logging
import time
from pathlib import Path

import numpy as np

from ..artifacts.schema import ArtifactRecord, check_runtime
from ..artifacts.targets import PARSER_GRAPH
from ..export.torch_runner import open_checkpoint
from ..runtime.artifact import RunnerOptions, artifact_files, open_artifact
from ..base.routing import routing_agreement
from ..runtime.runners import Runner, load_onnx, predict_all
from .options import ORT_PROVIDERS, BenchConfig, Reference
from .fidelity import fidelity, predicted
from .host import nvmap_mb, peak_rss_mb, rss_mb
from .power import PowerSampler
from .stats import time_runner
from ..artifacts.input_convention import PIXELS, graph_convention, graph_feed
from ..artifacts.model_io import check_sidecar_input

logger = logging.getLogger(__name__)

OPENERS = {"torch": open_checkpoint}  # the one format the torch-free floor leaves to the stages with torch


def open_any(path: str | Path, options: RunnerOptions = RunnerOptions(), content: bytes | None = None
             ) -> tuple[Runner, dict]:
    """`open_artifact` with PyTorch checkpoints too: everything bench takes."""
    return open_artifact(path, options, content, OPENERS)


def _onnx_precision(content: bytes) -> str:
    """An ONNX without a sidecar: the precision mlit-edge wrote into its metadata, if any."""
    try:
        meta = {p.key: p.value for p in load_onnx(content).metadata_props}
        return json.loads(meta.get("mlit_edge", "{}")).get("precision", "?")
    except Exception:  # not ours, or not parseable: the precision is unknown
        return "?"


def label(path: Path) -> str:
    """The name a table row shows: the file's, or for a weights pair (NAME/model.safetensors) its folder's."""
    return path.parent.name if path.name == "model.safetensors" else path.name


def graph_images(runner: Runner, record: ArtifactRecord, images: np.ndarray | None, path: Path) -> np.ndarray | None:
    """The bench's normalised images as this artifact's graph takes them: as they are, or a --raw-input
    graph's pixels (exactly: they were decoded from uint8). A sidecar that contradicts the graph is refused."""
    check_sidecar_input(record, runner.input_name, path, runner.input_dtype)
    if images is None or graph_convention(runner.input_name) != PIXELS:
        return images
    pre = record.preprocess
    if pre is None:
        raise ValueError(f"{path.name}: a --raw-input graph (input 'pixels') without its sidecar: the mean and std "
                         "to give the bench's images back as pixels are unknown; keep its .json beside it")
    return graph_feed(runner.input_name, images, pre.mean, pre.std, runner.input_dtype)


def random_batch(runner: Runner, b: int, rng: np.random.Generator) -> np.ndarray:
    """`b` random inputs in the graph's own type (no data set to time with): uint8 pixels for a uint8 graph."""
    shape = (b, *runner.input_shape[1:])
    if runner.input_dtype == "uint8":
        return rng.integers(0, 256, shape, dtype=np.uint8)
    return rng.standard_normal(shape).astype(np.float32)


def bench_artifact(path: str, cfg: BenchConfig, images: np.ndarray | None, labels: np.ndarray | None,
                   ref: Reference | None) -> dict:
    """Open one artifact, time each batch, then measure its accuracy and fidelity (when images are given).

    The reference itself is not opened again: in this process its runners come from the one load in
    `ref` (an isolated child has its own process to open it in), and its accuracy is its own logits."""
    path = Path(path)
    is_ref = ref is not None and bool(ref.path) and Path(ref.path).resolve() == path.resolve()
    loaded = is_ref and ref.make_runner is not None  # this process already holds the reference's one load
    content = None if loaded else path.read_bytes()
    before, nv_before = rss_mb(), nvmap_mb()
    if loaded:
        runner, record = ref.make_runner(cfg.runner_options()), ref.record
    else:
        runner, record = open_any(path, cfg.runner_options(), content)
    notes = [] if not record.empty or runner.name == "torch" else [f"{path.name} has no sidecar: provenance unknown"]
    if runner.name == "onnxruntime":
        if ORT_PROVIDERS["tensorrt"] in (cfg.providers or ()):
            check_runtime(record, PARSER_GRAPH, path)
        elif record.runtime == PARSER_GRAPH:
            notes.append("QDQ made for TensorRT: ONNX Runtime measures its accuracy; its CPU latency says nothing "
                         "of TensorRT's (the ONNX Runtime INT8 is the -int8-ort build)")
    runner.open()
    images = graph_images(runner, record, images, path)
    precision = (record.precision if not record.empty else
                 _onnx_precision(content) if runner.name == "onnxruntime" else "?")
    device_mb = None
    if runner.device_memory_bytes is not None:  # a GPU runner; on Jetson NvMap tells what it really mapped
        nv = nvmap_mb()
        device_mb = nv - nv_before if nv is not None and nv_before is not None else runner.device_memory_bytes / 2 ** 20
    entry = {"artifact": str(path), "label": label(path), "format": runner.name, "precision": precision,
             "size_mb": sum(f.stat().st_size for f in artifact_files(path)) / 2 ** 20, "load_rss_mb": rss_mb() - before, "device_mb": device_mb,
             "settings": runner.settings, "notes": notes, "accuracy": None, "latency": {}, "isolated": cfg.isolate}
    # timing first: the run memory is then the timed runner's alone, before the fidelity pass's runner
    rng = np.random.default_rng(0)
    power = PowerSampler.start()  # tegrastats on a Jetson (its idle draw first); None elsewhere: no power fields
    try:
        for b in cfg.batches:
            if runner.static_batch and b != runner.static_batch:
                notes.append(f"batch {b} skipped: the graph has a fixed batch of {runner.static_batch}")
                continue
            x = images[:b] if images is not None and len(images) >= b else random_batch(runner, b, rng)
            logger.info(f"timing {path.name} batch {b} ...")
            try:
                stats = time_runner(lambda: runner.infer({runner.input_name: x}), b, cfg.warmup_ms,
                                    cfg.warmup_iters, cfg.duration_s, cfg.iterations,
                                    gpu_ms=lambda: runner.last_gpu_ms)
            except ValueError as e:  # e.g. a batch outside a TensorRT profile
                notes.append(f"batch {b}: {e}")
                continue
            if power is not None:  # the readings of the timed calls alone, which ended just now
                notes += power.add_to(stats, time.perf_counter(), b)
            stats["run_rss_mb"] = rss_mb() - before  # what this artifact holds after this batch
            stats["peak_rss_mb"] = peak_rss_mb()
            entry["latency"][str(b)] = stats
    finally:  # an error or SIGTERM mid-timing too: tegrastats and what it forked never outlive the bench
        if power is not None:
            notes += power.stop()
    if images is not None:
        if is_ref and ref.logits is not None:
            logits, routes = ref.logits, ref.routes
        else:
            logger.info(f"accuracy {path.name} on {len(images)} images ...")
            routed, _ = open_any(path, cfg.runner_options(routing=True), content)
            with routed:
                logits, routes = predict_all(routed, images, routes=True)
        acc = {"images": int(len(labels)), "top1": float((predicted(logits) == labels).mean())}  # NaN rows: wrong
        if ref is not None and ref.logits is not None:
            acc.update(fidelity(logits, ref.logits, labels))
            if routes and ref.routes and len(routes) == len(ref.routes):
                acc["routing_agreement"] = routing_agreement(routes, ref.routes)
        entry["accuracy"] = acc
    entry["process_peak_rss_mb"] = peak_rss_mb()  # fidelity pass included
    runner.close()
    gc.collect()
    return entry
