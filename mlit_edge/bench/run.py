"""`mlit-edge bench`: latency, memory, accuracy and fidelity of artifacts against the PyTorch reference.

Each artifact is opened through `open_artifact`, timed batch by batch (`stats.time_runner`), then run
over the dataset's test split with its routing exposed and compared with the reference
(`fidelity`). With `isolate` (the CLI's default) each artifact runs in a fresh interpreter
(`isolation`), so the memory it adds on load and holds after timing is its own.
"""
from __future__ import annotations

import gc
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

from ..runtime.artifact import BATCH_PROFILE, RunnerOptions, artifact_format, open_artifact
from ..runtime.runners import routing_agreement
from .fidelity import fidelity
from .host import check_memory, environment, nvmap_mb, peak_rss_mb, rss_mb
from .stats import harness_overhead, time_runner

SCHEMA = "mlit-edge-bench/1"
ORT_PROVIDERS = {"cpu": "CPUExecutionProvider", "cuda": "CUDAExecutionProvider",
                 "tensorrt": "TensorrtExecutionProvider"}


def provider_names(csv: str) -> tuple[str, ...]:
    """`--ort-providers cpu,cuda` as ONNX Runtime's provider names."""
    names = [p.strip().lower() for p in csv.split(",") if p.strip()]
    unknown = [p for p in names if p not in ORT_PROVIDERS]
    if unknown or not names:
        raise ValueError(f"--ort-providers: unknown {unknown}; choose from {', '.join(ORT_PROVIDERS)}")
    return tuple(ORT_PROVIDERS[p] for p in names)


@dataclass(frozen=True)
class BenchConfig:
    """What `mlit-edge bench` was asked to measure; see the CLI's --help for each field."""

    batches: tuple[int, ...] = BATCH_PROFILE
    warmup_ms: float = 200.0
    warmup_iters: int = 10
    duration_s: float | None = 2.0
    iterations: int | None = None
    threads: int | None = None
    cuda_graph: bool = False
    providers: tuple[str, ...] | None = None
    data: str | None = None
    split: str = "test"
    limit: int | None = None
    data_root: str = "data"
    reference: str | None = None
    isolate: bool = False  # each artifact in its own fresh process (clean memory figures)
    ort_arena: bool = True  # ONNX Runtime's CPU memory arena

    def __post_init__(self) -> None:
        if not self.batches or min(self.batches) < 1:
            raise ValueError(f"batch sizes must be at least 1, got {list(self.batches)}")
        if self.iterations is None and (self.duration_s is None or self.duration_s <= 0):
            raise ValueError("give a positive duration or a number of iterations")
        unknown = set(self.providers or ()) - set(ORT_PROVIDERS.values())
        if unknown:
            raise ValueError(f"unknown ONNX Runtime providers {sorted(unknown)}")

    def runner_options(self, routing: bool = False) -> RunnerOptions:
        return RunnerOptions(routing=routing, threads=self.threads, providers=self.providers, ort_arena=self.ort_arena,
                             cuda_graph=self.cuda_graph, require_sidecar=False)


@dataclass
class Reference:
    """The PyTorch reference's outputs on the evaluation images, computed once per bench."""

    path: str
    record: dict
    logits: np.ndarray | None = None
    routes: list[np.ndarray] | None = None


def _eval_images(data: str, split: str, root: str, limit: int | None):
    from ..train.data import load_dataset

    ds = load_dataset(data, split, root)
    n = len(ds) if limit is None else min(limit, len(ds))
    return ds.inputs(slice(0, n)), ds.labels[:n].numpy(), ds.name


def _peek(path: str) -> dict:
    """An artifact's record without loading its model: the sidecar for an engine or an ONNX (unverified
    here; the artifact's own bench verifies it), the checkpoint's own description for a .pt."""
    from ..runtime.sidecar import read_sidecar

    if artifact_format(path).name == "torch":
        return open_artifact(path)[1]  # reads and hashes the checkpoint; its model is built only on open
    try:
        return read_sidecar(path, verify_hash=False)
    except (OSError, ValueError):
        return {}


def run_bench(paths: list[str], cfg: BenchConfig, log: Callable[[str], None] = print) -> dict:
    """Bench every artifact; returns the JSON-able report (rows, per-artifact details, environment)."""
    from ..runtime.trt_env import verify_plan
    from ..train.pretrained import is_pretrained, read_pretrained

    if not paths:
        raise ValueError("give at least one artifact (.plan, .onnx or .pt)")
    checked: dict[str, bytes] = {}  # the bytes of each pretrained:NAME, read and hashed once

    def resolve(spec: str) -> str:  # pretrained:NAME -> its checked file
        if not is_pretrained(spec):
            return str(spec)
        file, checked[str(file)] = read_pretrained(spec)
        return str(file)

    paths = [resolve(p) for p in paths]
    for p in paths:
        if not Path(p).exists():
            raise FileNotFoundError(f"{p} does not exist")
    formats = {p: artifact_format(p).name for p in paths}  # unknown types refused before any work
    for p in paths:  # refuse unrunnable engines before measuring anything
        if formats[p] == "tensorrt":
            verify_plan(p)
    ref_path = resolve(cfg.reference) if cfg.reference else next((p for p in paths if formats[p] == "torch"), None)
    peeks = {p: _peek(p) for p in paths if p != ref_path}
    if ref_path is None:
        ref_path = next((resolve(r["checkpoint"]) for r in peeks.values() if r.get("checkpoint")
                         and (is_pretrained(r["checkpoint"]) or Path(r["checkpoint"]).is_file())), None)
    ref = None
    if ref_path:
        content = checked.get(ref_path) or Path(ref_path).read_bytes()  # one read of the reference per command
        runner, record = open_artifact(ref_path, cfg.runner_options(routing=True), content)
        ref = Reference(str(ref_path), record)
        peeks[ref_path] = record
    check_memory(list(peeks.values()), cfg.batches, log)
    data = cfg.data or next(((r.get("preprocess") or {}).get("dataset") for r in ([ref.record] if ref else []) +
                             list(peeks.values()) if (r.get("preprocess") or {}).get("dataset")), None)
    report = {"schema": SCHEMA, "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
              "environment": environment(cfg.threads), "harness_overhead": harness_overhead(),
              "config": {"batches": list(cfg.batches), "warmup_ms": cfg.warmup_ms, "warmup_iters": cfg.warmup_iters,
                         "duration_s": cfg.duration_s, "iterations": cfg.iterations, "cuda_graph": cfg.cuda_graph,
                         "ort_arena": cfg.ort_arena, "data": data, "split": cfg.split,
                         "reference": ref.path if ref else None},
              "artifacts": [], "rows": []}
    images = labels = None
    if data:
        images, labels, data_name = _eval_images(data, cfg.split, cfg.data_root, cfg.limit)
        report["config"].update(data=data_name, images=int(len(labels)))
        if ref is not None:
            from ..runtime.runners import predict_all

            with runner:
                ref.logits, ref.routes = predict_all(runner, images, routes=True)
    else:
        log("note: no dataset known (no sidecar, no --data): accuracy and fidelity are skipped")
    provenance = reference_match(peeks, ref.path) if ref is not None and ref.logits is not None else {}
    for p, (_, note) in provenance.items():
        if note:
            log(f"note: {Path(p).name}: {note}")
    if cfg.isolate:
        from .isolation import bench_isolated

        entries = bench_isolated(paths, cfg, images, labels, ref)
    else:  # one artifact at a time, so each memory figure is as much its own as one process allows
        entries = (bench_artifact(p, cfg, images, labels, ref, log, content if ref and p == ref.path else None)
                   for p in paths)
    from .report import row

    for p, entry in zip(paths, entries):
        match, note = provenance.get(p, (None, None))
        entry["reference_match"] = match
        if note:
            entry["notes"].append(note)
        report["artifacts"].append(entry)
        report["rows"] += [row(entry, int(b), stats) for b, stats in entry["latency"].items()]
    return report


def _onnx_precision(content: bytes) -> str:
    """An ONNX without a sidecar: the precision mlit-edge wrote into its metadata, if any."""
    import json

    from ..runtime.runners import load_onnx

    try:
        meta = {p.key: p.value for p in load_onnx(content).metadata_props}
        return json.loads(meta.get("mlit_edge", "{}")).get("precision", "?")
    except Exception:  # not ours, or not parseable: the precision is unknown
        return "?"


def bench_artifact(path: str, cfg: BenchConfig, images: np.ndarray | None, labels: np.ndarray | None,
                   ref: Reference | None, log: Callable[[str], None] = print, content: bytes | None = None) -> dict:
    """Open one artifact, time each batch, then measure its accuracy and fidelity (when images are given)."""
    path = Path(path)
    content = content if content is not None else path.read_bytes()
    before, nv_before = rss_mb(), nvmap_mb()
    runner, record = open_artifact(path, cfg.runner_options(), content)
    notes = [] if record or runner.name == "torch" else [f"{path.name} has no sidecar: provenance unknown"]
    if runner.name == "onnxruntime":
        from ..runtime.schema import check_runtime

        if ORT_PROVIDERS["tensorrt"] in (cfg.providers or ()):
            check_runtime(record, "tensorrt", path)
        elif record.get("runtime") == "tensorrt":
            notes.append("QDQ made for TensorRT: ONNX Runtime measures its accuracy; its CPU latency says nothing "
                         "of TensorRT's (the ONNX Runtime INT8 is the -int8-ort build)")
    runner.open()
    precision = record.get("precision") or (_onnx_precision(content) if runner.name == "onnxruntime" else "?")
    device_mb = None
    if runner.device_memory_bytes is not None:  # a GPU runner; on Jetson NvMap tells what it really mapped
        nv = nvmap_mb()
        device_mb = nv - nv_before if nv is not None and nv_before is not None else runner.device_memory_bytes / 2 ** 20
    entry = {"artifact": str(path), "label": path.name, "format": runner.name, "precision": precision,
             "size_mb": len(content) / 2 ** 20, "load_rss_mb": rss_mb() - before, "device_mb": device_mb,
             "settings": runner.settings, "notes": notes, "accuracy": None, "latency": {}, "isolated": cfg.isolate}
    # timing first: the run memory is then the timed runner's alone, before the fidelity pass's runner
    rng = np.random.default_rng(0)
    for b in cfg.batches:
        if runner.static_batch and b != runner.static_batch:
            notes.append(f"batch {b} skipped: the graph has a fixed batch of {runner.static_batch}")
            continue
        x = (images[:b] if images is not None and len(images) >= b else
             rng.standard_normal((b, *runner.input_shape[1:])).astype(np.float32))
        log(f"timing {path.name} batch {b} ...")
        try:
            stats = time_runner(lambda: runner.infer({runner.input_name: x}), b, cfg.warmup_ms, cfg.warmup_iters,
                                cfg.duration_s, cfg.iterations, gpu_ms=lambda: runner.last_gpu_ms)
        except ValueError as e:  # e.g. a batch outside a TensorRT profile
            notes.append(f"batch {b}: {e}")
            continue
        stats["run_rss_mb"] = rss_mb() - before  # what this artifact holds after this batch
        stats["peak_rss_mb"] = peak_rss_mb()
        entry["latency"][str(b)] = stats
    if images is not None:
        from ..runtime.runners import predict_all

        log(f"accuracy {path.name} on {len(images)} images ...")
        routed, _ = open_artifact(path, cfg.runner_options(routing=True), content)
        with routed:
            logits, routes = predict_all(routed, images, routes=True)
        acc = {"images": int(len(labels)), "top1": float((logits.argmax(1) == labels).mean())}
        if ref is not None and ref.logits is not None:
            acc.update(fidelity(logits, ref.logits, labels))
            if routes and ref.routes and len(routes) == len(ref.routes):
                acc["routing_agreement"] = routing_agreement(routes, ref.routes)
        entry["accuracy"] = acc
    entry["process_peak_rss_mb"] = peak_rss_mb()  # fidelity pass included
    runner.close()
    gc.collect()
    return entry


def reference_match(peeks: dict[str, dict], ref_path: str) -> dict[str, tuple[bool | None, str | None]]:
    """Per artifact: whether it was built from the reference checkpoint (by sha256; None when its record
    does not say), and a note when not, since its agreement and routing then compare two different models."""
    ref_sha = peeks[ref_path].get("checkpoint_sha256")
    if ref_sha is None:
        return {}
    out: dict[str, tuple[bool | None, str | None]] = {}
    for p, rec in peeks.items():
        sha = rec.get("checkpoint_sha256")
        if rec.get("random_weights"):
            out[p] = (False, "random weights (built without a checkpoint): agreement with the reference is "
                             "meaningless")
        elif sha is None:
            out[p] = (None, None)
        elif sha == ref_sha:
            out[p] = (True, None)
        else:
            out[p] = (False, f"built from {rec.get('checkpoint') or p} (sha256 {sha[:12]}), not from the reference "
                             f"{ref_path} ({ref_sha[:12]}): agreement and routing compare two different models")
    return out


