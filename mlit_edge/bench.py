"""`mlit-edge bench`: latency, memory, accuracy and fidelity of artifacts against the PyTorch reference.

Timing follows trtexec: warm up for at least `warmup_ms` *and* `warmup_iters` calls, then time
every call for `duration_s` (or exactly `iterations` calls); report min, mean, median, p90, p95,
p99, max and throughput. Percentiles are nearest-rank: the p-th percentile of n sorted samples is
the ceil(p/100 * n)-th smallest, a value that was actually measured. On GPU the engine's compute
time (CUDA events) is reported apart from host latency.

Fidelity compares each artifact's logits with the reference's on the same preprocessed images:
top-1 of both, prediction agreement, max/mean abs logit error, cosine similarity, and per-layer
routing agreement (the share of tokens whose top-k expert set equals the reference's). ONNX
artifacts have their routing recovered from their own TopK nodes, so every ONNX gets it.

Memory: with `isolate` (the CLI's default) each artifact runs in a fresh interpreter, so the RSS it
adds on load and holds after timing is its own, not memory an earlier artifact freed.
"""
from __future__ import annotations

import gc
import json
import math
import os
import platform
import resource
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np

from .engine import PLAN_SUFFIXES
from .runners import OnnxRuntimeRunner, Runner, input_name, predict_all, static_batch

PERCENTILES = (50, 90, 95, 99)
SCHEMA = "mlit-edge-bench/1"
ORT_PROVIDERS = {"cpu": "CPUExecutionProvider", "cuda": "CUDAExecutionProvider", "tensorrt": "TensorrtExecutionProvider"}


# --- statistics --------------------------------------------------------------------------------------

def percentile(sorted_ms: list[float] | np.ndarray, p: float) -> float:
    """Nearest-rank percentile of already sorted samples."""
    n = len(sorted_ms)
    if n == 0:
        raise ValueError("no samples")
    rank = max(1, math.ceil(p / 100.0 * n))
    return float(sorted_ms[rank - 1])


def latency_stats(samples_ms: list[float], batch: int, wall_s: float | None = None) -> dict:
    """min/mean/median/p90/p95/p99/max in ms, and throughput in images/s (over the timed wall time
    when given, else over the sum of the samples)."""
    s = np.sort(np.asarray(samples_ms, dtype=np.float64))
    total_s = wall_s if wall_s else float(s.sum()) / 1e3
    return {"iterations": int(len(s)), "min": float(s[0]), "mean": float(s.mean()), "median": percentile(s, 50),
            **{f"p{p}": percentile(s, p) for p in PERCENTILES if p != 50}, "max": float(s[-1]),
            "throughput": batch * len(s) / total_s if total_s > 0 else float("inf")}


def time_runner(infer: Callable[[], object], batch: int, warmup_ms: float = 200.0, warmup_iters: int = 10,
                duration_s: float | None = 2.0, iterations: int | None = None, min_iters: int = 10,
                gpu_ms: Callable[[], float | None] | None = None) -> dict:
    """Warm up by time and by count, then time each call; returns `latency_stats` (+ GPU compute)."""
    start = time.perf_counter()
    n = 0
    while n < warmup_iters or (time.perf_counter() - start) * 1e3 < warmup_ms:
        infer()
        n += 1
    samples, gpu = [], []
    t0 = time.perf_counter()
    while True:
        a = time.perf_counter()
        infer()
        samples.append((time.perf_counter() - a) * 1e3)
        if gpu_ms is not None and (g := gpu_ms()) is not None:
            gpu.append(g)
        if iterations is not None:
            if len(samples) >= iterations:
                break
        elif len(samples) >= min_iters and time.perf_counter() - t0 >= duration_s:
            break
    stats = latency_stats(samples, batch, time.perf_counter() - t0)
    stats["warmup_iterations"] = n
    if gpu:
        stats["gpu_compute"] = {k: v for k, v in latency_stats(gpu, batch).items() if k != "throughput"}
    stats["samples_ms"] = samples
    return stats


# --- fidelity ----------------------------------------------------------------------------------------

def fidelity(logits: np.ndarray, ref: np.ndarray, labels: np.ndarray | None = None) -> dict:
    """How `logits` compare with the reference's: exact zeros/ones for identical outputs."""
    logits, ref = logits.astype(np.float64), ref.astype(np.float64)
    err = np.abs(logits - ref)
    norms = np.linalg.norm(logits, axis=1) * np.linalg.norm(ref, axis=1)
    same = np.all(logits == ref, axis=1)
    cos = np.where(same, 1.0, (logits * ref).sum(1) / np.where(norms == 0, 1.0, norms))
    out = {"max_abs_err": float(err.max()), "mean_abs_err": float(err.mean()),
           "cosine": float(np.clip(cos, -1.0, 1.0).mean()),
           "agreement": float((logits.argmax(1) == ref.argmax(1)).mean())}
    if labels is not None:
        out["top1"] = float((logits.argmax(1) == labels).mean())
        out["top1_reference"] = float((ref.argmax(1) == labels).mean())
        out["top1_delta"] = out["top1"] - out["top1_reference"]
    return out


def routing_agreement(routes: list[np.ndarray], ref_routes: list[np.ndarray]) -> list[float]:
    """Per layer: the share of tokens whose set of top-k experts equals the reference's."""
    if len(routes) != len(ref_routes):
        raise ValueError(f"{len(routes)} routed layers vs {len(ref_routes)} in the reference")
    out = []
    for got, want in zip(routes, ref_routes):
        k = got.shape[-1]
        g, w = np.sort(got.reshape(-1, k), axis=1), np.sort(want.reshape(-1, k), axis=1)
        out.append(float(np.all(g == w, axis=1).mean()))
    return out


# --- memory and environment -------------------------------------------------------------------------

def rss_mb() -> float:
    """The current resident set size (Linux /proc; peak RSS elsewhere)."""
    try:
        pages = int(Path("/proc/self/statm").read_text().split()[1])
        return pages * os.sysconf("SC_PAGE_SIZE") / 2 ** 20
    except (OSError, ValueError, IndexError):
        return peak_rss_mb()


def peak_rss_mb() -> float:
    """This process's peak resident set size.

    Linux's VmHWM belongs to the address space, which exec replaces; getrusage's ru_maxrss survives
    exec, so a child started from a large parent would report the parent's peak as its own.
    """
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024  # kB
    except (OSError, ValueError, IndexError):
        pass
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / 2 ** 20 if platform.system() == "Darwin" else peak / 1024  # bytes on macOS, kB elsewhere


def nvmap_mb() -> float | None:
    """Jetson: memory the GPU driver has mapped (NvMapMemUsed in /proc/meminfo); None elsewhere.
    On Jetson the GPU shares DRAM, so cudaMemGetInfo does not tell what the engine holds."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("NvMapMemUsed:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return None


def _run(cmd: list[str]) -> str | None:
    import shutil
    import subprocess

    if not shutil.which(cmd[0]):
        return None
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=10).stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None


def environment(threads: int | None = None) -> dict:
    """CPU/GPU, threads and library versions; on Jetson also the power mode and clocks."""
    import importlib.metadata as md

    from .engine import local_env

    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    libs = {}
    for dist in ("numpy", "onnx", "onnxruntime", "torch", "tensorrt", "tensorrt-rtx-cu13", "cuda-python", "mlit-edge"):
        try:
            libs[dist] = md.version(dist)
        except md.PackageNotFoundError:
            continue
    env = local_env("tensorrt")
    out = {"cpu": cpu, "cores": os.cpu_count(), "threads": threads, "platform": platform.platform(),
           "python": platform.python_version(), "libraries": libs,
           "gpu": {"name": env.gpu_name, "compute_capability": env.compute_capability, "cuda": env.cuda_version},
           "l4t": env.l4t, "jetpack": env.jetpack}
    if env.l4t:  # Jetson: the numbers mean little without the power mode and clocks
        out["power_mode"] = _run(["nvpmodel", "-q"])
        out["clocks"] = _run(["jetson_clocks", "--show"])
    return out


# --- artifacts --------------------------------------------------------------------------------------

@dataclass
class Artifact:
    """One thing to bench: its runner for timing, and what it records about itself."""

    path: Path
    format: str  # "tensorrt", "onnxruntime" or "torch"
    precision: str
    record: dict
    runner: Runner
    routing_runner: Runner | None = None  # same model with its routing exposed; opened by _outputs
    load_rss_mb: float = 0.0
    rss_before_mb: float = 0.0
    device_mb: float | None = None
    label: str = ""
    notes: list[str] = field(default_factory=list)


def _onnx_record(path: Path) -> dict:
    from .sidecar import read_sidecar

    try:
        return read_sidecar(path)
    except FileNotFoundError:
        return {}


def open_artifact(path: str | Path, threads: int | None = None, providers: list[str] | None = None,
                  cuda_graph: bool = False, device: str = "cpu", ort_arena: bool = True) -> Artifact:
    """Pick the runner from the file (and its sidecar) and open it, measuring the RSS its runner adds."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"{path} does not exist")
    before = rss_mb()
    nv_before = nvmap_mb()
    suffix = path.suffix.lower()
    if suffix in PLAN_SUFFIXES:
        from .runners import TensorRTRunner

        runner = TensorRTRunner(path, cuda_graph=cuda_graph)
        runner.open()  # load_engine refuses (one line) without TensorRT, without a GPU, or on a mismatch
        art = Artifact(path, "tensorrt", runner.record.get("precision", "?"), runner.record, runner)
        art.device_mb = runner.device_memory_bytes / 2 ** 20
        loaded = rss_mb()
    elif suffix == ".onnx":
        record = _onnx_record(path)
        runner = OnnxRuntimeRunner(path, threads=threads, providers=providers, mem_arena=ort_arena)
        runner.open()
        loaded = rss_mb()
        precision = record.get("precision") or _onnx_precision(path)
        art = Artifact(path, "onnxruntime", precision, record, runner,
                       routing_runner=OnnxRuntimeRunner(path, threads=threads, expose_routing=True,
                                                        mem_arena=ort_arena))
        if not record:
            art.notes.append(f"{path.name} has no sidecar: provenance unknown")
    elif suffix in (".pt", ".pth"):
        from .checkpoint import load_checkpoint, model_from_checkpoint
        from .deploy import to_deploy
        from .export import output_names
        from .runners import TorchRunner

        ckpt = load_checkpoint(path, kind="mlit")
        model = model_from_checkpoint(ckpt).eval()
        runner = TorchRunner(model, ["logits"], device=device, threads=threads)
        runner.open()
        loaded = rss_mb()
        route = TorchRunner(to_deploy(model, probe=True), output_names(model.cfg.depth, True), device=device,
                            threads=threads)
        record = {"precision": "fp32", "classes": ckpt["data"]["classes"],
                  "preprocess": {"dataset": ckpt["data"]["name"], "mean": ckpt["data"]["mean"],
                                 "std": ckpt["data"]["std"], "size": ckpt["data"].get("img_size", 36)},
                  "checkpoint": str(path), "model": {"size": ckpt.get("size")}}
        art = Artifact(path, "torch", "fp32", record, runner, routing_runner=route)
    else:
        raise ValueError(f"{path}: unknown artifact type {suffix or '(none)'}; expected .plan, .onnx or .pt")
    # the routing runner is opened only for the fidelity pass, after timing (see bench_artifact)
    art.load_rss_mb, art.rss_before_mb = loaded - before, before
    if nv_before is not None and art.format == "tensorrt":
        art.device_mb = (nvmap_mb() or 0.0) - nv_before
    art.label = f"{path.name}"
    return art


def _onnx_precision(path: Path) -> str:
    import onnx

    meta = {p.key: p.value for p in onnx.load(str(path), load_external_data=False).metadata_props}
    try:
        return json.loads(meta.get("mlit_edge", "{}")).get("precision", "fp32")
    except json.JSONDecodeError:
        return "?"


def _outputs(art: Artifact, images: np.ndarray) -> tuple[np.ndarray, list[np.ndarray] | None]:
    """Logits and routing of an artifact. A checkpoint's logits come from the eval-mode model itself;
    its routing from `to_deploy`, whose choices equal the model's (tested in test_export)."""
    if art.routing_runner is not None:
        art.routing_runner.open()
    if art.format == "torch":
        logits, _ = predict_all(art.runner, images)
        _, routes = predict_all(art.routing_runner, images, routes=True)
        return logits, routes
    return predict_all(art.routing_runner or art.runner, images, routes=art.routing_runner is not None)


class NullRunner(Runner):
    """Returns its input: what the timing loop costs by itself."""

    name = "null"

    @property
    def output_names(self) -> list[str]:
        return ["logits"]

    def infer(self, feed):
        return {"logits": next(iter(feed.values()))}


def harness_overhead(iterations: int = 2000) -> dict:
    """The harness's own per-call cost, measured on a runner that does nothing."""
    runner = NullRunner()
    x = np.zeros((1, 3, 36, 36), np.float32)
    stats = time_runner(lambda: runner.infer({"images": x}), 1, warmup_ms=0, warmup_iters=100,
                        duration_s=None, iterations=iterations)
    return {"median_us": stats["median"] * 1e3, "p99_us": stats["p99"] * 1e3, "iterations": iterations}


# --- the whole bench ----------------------------------------------------------------------------------

@dataclass
class BenchConfig:
    batches: tuple[int, ...] = (1, 8, 64)
    warmup_ms: float = 200.0
    warmup_iters: int = 10
    duration_s: float | None = 2.0
    iterations: int | None = None
    threads: int | None = None
    cuda_graph: bool = False
    providers: list[str] | None = None
    data: str | None = None
    split: str = "test"
    limit: int | None = None
    data_root: str = "data"
    reference: str | None = None
    isolate: bool = False  # each artifact in its own fresh process (clean memory figures)
    ort_arena: bool = True  # ONNX Runtime's CPU memory arena


def _eval_images(data: str, split: str, root: str, limit: int | None):
    from .data import load_dataset

    ds = load_dataset(data, split, root)
    n = len(ds) if limit is None else min(limit, len(ds))
    return ds.inputs(slice(0, n)), ds.labels[:n].numpy(), ds.name


def run_bench(paths: list[str], cfg: BenchConfig, log: Callable[[str], None] = print) -> dict:
    """Bench every artifact; returns the JSON-able report (rows, per-artifact details, environment)."""
    if not paths:
        raise ValueError("give at least one artifact (.plan, .onnx or .pt)")
    for p in paths:
        if not Path(p).exists():
            raise FileNotFoundError(f"{p} does not exist")
    for p in paths:  # refuse unrunnable engines before measuring anything
        if Path(p).suffix.lower() in PLAN_SUFFIXES:
            from .engine import verify_plan

            verify_plan(p)
    peeks = {p: _peek(p) for p in paths}
    ref_path = cfg.reference or next((p for p in paths if Path(p).suffix.lower() in (".pt", ".pth")), None) or next(
        (r["checkpoint"] for r in peeks.values() if r.get("checkpoint") and Path(r["checkpoint"]).is_file()), None)
    if ref_path and ref_path not in peeks:
        peeks[ref_path] = _peek(ref_path)
    data = cfg.data or next((r["preprocess"]["dataset"] for r in ([peeks[ref_path]] if ref_path else []) +
                             list(peeks.values()) if (r.get("preprocess") or {}).get("dataset")), None)
    report = {"schema": SCHEMA, "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
              "environment": environment(cfg.threads), "harness_overhead": harness_overhead(),
              "config": {"batches": list(cfg.batches), "warmup_ms": cfg.warmup_ms, "warmup_iters": cfg.warmup_iters,
                         "duration_s": cfg.duration_s, "iterations": cfg.iterations, "cuda_graph": cfg.cuda_graph,
                         "ort_arena": cfg.ort_arena,
                         "data": data, "split": cfg.split, "reference": str(ref_path) if ref_path else None},
              "artifacts": [], "rows": []}
    ref_logits = ref_routes = labels = images = None
    if data:
        images, labels, data_name = _eval_images(data, cfg.split, cfg.data_root, cfg.limit)
        report["config"]["data"] = data_name
        report["config"]["images"] = int(len(labels))
        if ref_path:
            reference = open_artifact(ref_path, cfg.threads)
            ref_logits, ref_routes = _outputs(reference, images)
            _close(reference)
    else:
        log("note: no dataset known (no sidecar, no --data): accuracy and fidelity are skipped")
    provenance = _reference_match(peeks, ref_path) if ref_logits is not None else {}
    for p, (_, note) in provenance.items():
        if note:
            log(f"note: {Path(p).name}: {note}")
    # one artifact at a time (each in its own process with cfg.isolate), so each memory figure is its own
    entries = (_bench_isolated(paths, cfg, images, labels, ref_logits, ref_routes) if cfg.isolate else
               (bench_artifact(p, cfg, images, labels, ref_logits, ref_routes, log) for p in paths))
    for p, entry in zip(paths, entries):
        match, note = provenance.get(p, (None, None))
        entry["reference_match"] = match
        if note:
            entry["notes"].append(note)
        report["artifacts"].append(entry)
        report["rows"] += [_row(entry, int(b), stats) for b, stats in entry["latency"].items()]
    return report


def bench_artifact(path: str, cfg: BenchConfig, images: np.ndarray | None, labels: np.ndarray | None,
                   ref_logits: np.ndarray | None, ref_routes: list[np.ndarray] | None,
                   log: Callable[[str], None] = print) -> dict:
    """Open one artifact, time each batch, then measure its accuracy and fidelity (when images are given)."""
    rng = np.random.default_rng(0)
    art = open_artifact(path, cfg.threads, cfg.providers, cfg.cuda_graph, ort_arena=cfg.ort_arena)
    entry = {"artifact": str(art.path), "label": art.label, "format": art.format, "precision": art.precision,
             "size_mb": art.path.stat().st_size / 2 ** 20, "load_rss_mb": art.load_rss_mb,
             "device_mb": art.device_mb, "notes": art.notes, "accuracy": None, "latency": {},
             "isolated": cfg.isolate}
    if art.format == "onnxruntime":  # as the session has it, not as asked
        entry["ort_arena"] = bool(art.runner.session.get_session_options().enable_cpu_mem_arena)
    # timing first: the run memory is then the timed runner's alone, before the fidelity pass's session
    name = input_name(art.runner)
    fixed = static_batch(art.runner)
    for b in cfg.batches:
        if fixed and b != fixed:
            entry["notes"].append(f"batch {b} skipped: the graph has a fixed batch of {fixed}")
            continue
        x = (images[:b] if images is not None and len(images) >= b else
             rng.standard_normal((b, 3, 36, 36)).astype(np.float32))
        log(f"timing {art.label} batch {b} ...")
        gpu = (lambda r=art.runner: r.last_gpu_ms) if art.format == "tensorrt" else None
        try:
            stats = time_runner(lambda: art.runner.infer({name: x}), b, cfg.warmup_ms, cfg.warmup_iters,
                                cfg.duration_s, cfg.iterations, gpu_ms=gpu)
        except ValueError as e:  # e.g. a batch outside a TensorRT profile
            entry["notes"].append(f"batch {b}: {e}")
            continue
        stats["run_rss_mb"] = rss_mb() - art.rss_before_mb  # what this artifact holds after this batch
        stats["peak_rss_mb"] = peak_rss_mb()
        entry["latency"][str(b)] = stats
    if images is not None:
        log(f"accuracy {art.label} on {len(images)} images ...")
        logits, routes = _outputs(art, images)
        acc = {"images": int(len(labels)), "top1": float((logits.argmax(1) == labels).mean())}
        if ref_logits is not None:
            acc.update(fidelity(logits, ref_logits, labels))
            if routes and ref_routes and len(routes) == len(ref_routes):
                acc["routing_agreement"] = routing_agreement(routes, ref_routes)
        entry["accuracy"] = acc
    entry["process_peak_rss_mb"] = peak_rss_mb()  # fidelity pass included
    _close(art)
    return entry


# --- one process per artifact --------------------------------------------------------------------------
# In one process the allocator hands memory freed by the reference or an earlier artifact to the next one,
# so its load and run deltas read near zero. A fresh interpreter per artifact gives each its own figures;
# the reference's logits and routing are computed once here and handed over in an .npz.

_RUNTIME_MODULE = {".onnx": "onnxruntime", ".pt": "torch", ".pth": "torch"}


def _bench_isolated(paths: list[str], cfg: BenchConfig, images: np.ndarray | None, labels: np.ndarray | None,
                    ref_logits: np.ndarray | None, ref_routes: list[np.ndarray] | None) -> list[dict]:
    import subprocess
    import sys
    import tempfile
    from dataclasses import asdict

    entries = []
    with tempfile.TemporaryDirectory(prefix="mlit-bench-") as tmp:
        tmp = Path(tmp)
        arrays = {}
        if images is not None:
            arrays.update(images=images, labels=labels)
        if ref_logits is not None:
            arrays["ref_logits"] = ref_logits
        for i, r in enumerate(ref_routes or []):
            arrays[f"ref_route_{i}"] = r
        np.savez(tmp / "inputs.npz", **arrays)
        (tmp / "config.json").write_text(json.dumps({**asdict(cfg), "batches": list(cfg.batches)}))
        for i, path in enumerate(paths):
            out = tmp / f"entry{i}.json"
            proc = subprocess.run([sys.executable, "-m", "mlit_edge.bench", str(tmp), str(Path(path).resolve()),
                                   str(out)], stdout=subprocess.DEVNULL)  # its progress lines go to our stderr
            result = json.loads(out.read_text()) if out.is_file() else {}
            if proc.returncode != 0 or "error" in result:
                raise RuntimeError(f"{path}: {result.get('error') or f'bench process exited with {proc.returncode}'}")
            entry = result["entry"]
            entry["artifact"] = str(path)
            entries.append(entry)
    return entries


def _worker(folder: str, path: str, out: str) -> int:
    """The child side of `_bench_isolated`: bench one artifact, write {"entry": ...} or {"error": ...}."""
    import importlib
    import sys

    folder = Path(folder)
    try:
        cfg = json.loads((folder / "config.json").read_text())
        cfg = BenchConfig(**{**cfg, "batches": tuple(cfg["batches"]), "isolate": True})
        module = _RUNTIME_MODULE.get(Path(path).suffix.lower())
        if module:  # the runtime library itself is not the artifact's memory
            importlib.import_module(module)
        with np.load(folder / "inputs.npz") as z:
            arrays = {k: z[k] for k in z.files}
        routes = [arrays[f"ref_route_{i}"] for i in range(sum(k.startswith("ref_route_") for k in arrays))]
        entry = bench_artifact(path, cfg, arrays.get("images"), arrays.get("labels"), arrays.get("ref_logits"),
                               routes or None, log=lambda line: print(line, file=sys.stderr, flush=True))
        result = {"entry": entry}
    except Exception as e:  # reported by the parent as one line
        result = {"error": str(e) or type(e).__name__}
    Path(out).write_text(json.dumps(result))
    return 1 if "error" in result else 0


def _close(art: Artifact) -> None:
    for r in (art.runner, art.routing_runner):
        if r is not None:
            r.close()
    gc.collect()


def _reference_match(peeks: dict[str, dict], ref_path: str) -> dict[str, tuple[bool | None, str | None]]:
    """Per artifact: whether it was built from the reference checkpoint (by sha256; None when its record
    does not say), and a note when not, since its agreement and routing then compare two different models."""
    ref_sha = peeks[ref_path].get("checkpoint_sha256") if Path(ref_path).suffix.lower() in (".pt", ".pth") else None
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


def _peek(path: str) -> dict:
    """An artifact's sidecar record without opening it ({} when it has none)."""
    p = Path(path)
    if p.suffix.lower() in (".pt", ".pth"):
        import hashlib
        import io

        import torch

        try:
            data = p.read_bytes()  # one read for the dataset name and the hash the provenance check compares
            ckpt = torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
            return {"checkpoint": str(p), "checkpoint_sha256": hashlib.sha256(data).hexdigest(),
                    "preprocess": {"dataset": ckpt["data"]["name"]}}
        except Exception:  # a bad checkpoint is reported when it is opened
            return {}
    from .sidecar import read_sidecar

    try:
        return read_sidecar(p, verify_hash=False)
    except (OSError, ValueError):
        return {}


def _row(entry: dict, batch: int, stats: dict) -> dict:
    acc = entry["accuracy"] or {}
    ra = acc.get("routing_agreement")
    return {"artifact": entry["label"], "format": entry["format"], "precision": entry["precision"], "batch": batch,
            "size_mb": entry["size_mb"], "top1": acc.get("top1"), "top1_delta": acc.get("top1_delta"),
            "agreement": acc.get("agreement"), "routing_agreement": (min(ra) if ra else None),
            "p50_ms": stats["median"], "p99_ms": stats["p99"], "fps": stats["throughput"],
            "gpu_p50_ms": (stats.get("gpu_compute") or {}).get("median"),
            "run_rss_mb": stats["run_rss_mb"], "load_rss_mb": entry["load_rss_mb"], "device_mb": entry["device_mb"]}


def format_table(report: dict) -> str:
    """One row per artifact x batch."""
    head = ["artifact", "format", "prec", "batch", "MB", "top-1", "Δ torch", "agree", "route", "p50 ms", "p99 ms",
            "FPS", "RSS MB load/run"]
    rows = []

    def f(v, fmt):
        return "-" if v is None else format(v, fmt)

    for r in report["rows"]:
        rows.append([r["artifact"], r["format"], r["precision"], str(r["batch"]), f(r["size_mb"], ".2f"),
                     f(r["top1"], ".4f"), "-" if r["top1_delta"] is None else f"{100 * r['top1_delta']:+.2f}pt",
                     f(r["agreement"], ".4f"), f(r["routing_agreement"], ".4f"), f(r["p50_ms"], ".3f"),
                     f(r["p99_ms"], ".3f"), f(r["fps"], ".0f"),
                     f"+{r['load_rss_mb']:.0f} / +{r['run_rss_mb']:.0f}"])
    widths = [max(len(h), *(len(row[i]) for row in rows)) if rows else len(h) for i, h in enumerate(head)]
    lines = ["  ".join(h.ljust(w) if i < 3 else h.rjust(w) for i, (h, w) in enumerate(zip(head, widths)))]
    lines += ["  ".join(c.ljust(w) if i < 3 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths)))
              for row in rows]
    cfg, env = report["config"], report["environment"]
    ho = report["harness_overhead"]
    lines.append(f"data: {cfg.get('data')} {cfg.get('split')} ({cfg.get('images', 0)} images); reference: "
                 f"{cfg.get('reference') or 'none'}; route = worst layer's top-k agreement with the reference")
    lines.append(f"host: {env['cpu']}, {env['threads'] or 'default'} threads; harness overhead "
                 f"{ho['median_us']:.1f} µs/call (median)")
    isolated = all(a.get("isolated") for a in report["artifacts"])
    lines.append("RSS MB load/run: resident memory the artifact added when loaded / holds after its timed runs "
                 + ("(each artifact in its own process; process peak in the JSON)" if isolated else
                    "(in one process: later artifacts reuse freed memory, so theirs read low)")
                 + ("; ONNX Runtime's CPU arena off" if cfg.get("ort_arena") is False else ""))
    for a in report["artifacts"]:
        if a.get("device_mb") is not None:
            lines.append(f"device memory: {a['label']}: {a['device_mb']:.1f} MB")
        lines += [f"note: {a['label']}: {n}" for n in a["notes"]]
    return "\n".join(lines)


def strip_samples(report: dict) -> dict:
    """The report without per-call samples (for a compact JSON)."""
    out = json.loads(json.dumps(report))
    for a in out["artifacts"]:
        for stats in a["latency"].values():
            stats.pop("samples_ms", None)
    return out


def plot(report: dict, folder: str | Path) -> list[Path]:
    """latency.png (per-call latency distribution per artifact and batch) and accuracy_latency.png."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    series = [(f"{a['label']} b{b}", s["samples_ms"]) for a in report["artifacts"] for b, s in a["latency"].items()]
    paths = []
    if series:
        fig, ax = plt.subplots(figsize=(8, 0.45 * len(series) + 1.5))
        ax.boxplot([s for _, s in series], vert=False, whis=(1, 99), showfliers=False)
        ax.set_yticks(range(1, len(series) + 1), [n for n, _ in series])
        ax.set_xscale("log")
        ax.set_xlabel("latency per call (ms), whiskers p1-p99")
        paths.append(_save(fig, folder / "latency.png"))
    points = [(r["p50_ms"], r["top1"], f"{r['artifact']} b{r['batch']}") for r in report["rows"]
              if r["top1"] is not None and r["batch"] == min(x["batch"] for x in report["rows"])]
    if points:
        fig, ax = plt.subplots(figsize=(6, 4))
        for x, y, name in points:
            ax.scatter(x, y)
            ax.annotate(name, (x, y), fontsize=7)
        ax.set_xlabel("p50 latency (ms)")
        ax.set_ylabel("top-1")
        paths.append(_save(fig, folder / "accuracy_latency.png"))
    return paths


def _save(fig, path: Path) -> Path:
    import matplotlib.pyplot as plt

    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


if __name__ == "__main__":
    import sys

    raise SystemExit(_worker(*sys.argv[1:4]))
