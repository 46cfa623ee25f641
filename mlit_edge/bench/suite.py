"""`mlit-edge bench`: latency, memory, accuracy and fidelity of artifacts against the PyTorch reference.

The reference is opened once and run once over the evaluation images; each artifact is then benched
by `artifact.bench_artifact` (timed batch by batch, then run over the test split with its routing
exposed and compared with the reference). With `isolate` (the default) each artifact runs in a
fresh interpreter (`isolation`), so the memory it adds on load and holds after timing is its own.
The report is saved once, at the end, with everything measured.
"""
from __future__ import annotations

import logging
import time
from pathlib import Path

from ..export.torch_runner import checkpoint_opener
from ..runtime.artifact import artifact_format
from ..artifacts.schema import ArtifactRecord, recorded
from ..base.messages import first_line, printable, require_file
from .one_artifact import bench_artifact, label, open_any
from .options import BenchConfig, Reference
from .host import check_memory, environment
from .isolation import bench_isolated
from .report import row, save_report
from .stats import harness_overhead
from ..devices.trt_env import verify_plan
from ..runtime.runners import predict_all

logger = logging.getLogger(__name__)

SCHEMA = "mlit-edge-bench/1"


def _eval_images(data: str, split: str, root: str, limit: int | None):
    from ..train.data import load_dataset

    ds = load_dataset(data, split, root)
    n = len(ds) if limit is None else min(limit, len(ds))
    return ds.inputs(slice(0, n)), ds.labels[:n].numpy(), ds.name


def _peek(path: str) -> ArtifactRecord:
    """An artifact's record without loading its model: the sidecar for an engine or an ONNX (unverified
    here; the artifact's own bench verifies it), the checkpoint's own description for a .pt."""
    if artifact_format(path).name == "torch":
        return open_any(path)[1]  # reads and hashes the checkpoint; its model is built only on open
    try:
        return recorded(path, verify_hash=False)
    except (OSError, ValueError):
        return ArtifactRecord()


def run_bench(paths: list[str], cfg: BenchConfig) -> dict:
    """Bench every artifact; returns the JSON-able report (rows, per-artifact details, environment)."""
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
    for p in paths:  # a FIFO or a device would block the first read, or never end
        require_file(p)
    formats = {p: artifact_format(p).name for p in paths}  # unknown types refused before any work
    for p in paths:
        _readable(p, formats[p])
    for p in paths:  # refuse unrunnable engines before measuring anything
        if formats[p] == "tensorrt":
            verify_plan(p)
    ref_path = resolve(cfg.reference) if cfg.reference else next((p for p in paths if formats[p] == "torch"), None)
    peeks = {p: _peek(p) for p in paths if p != ref_path}
    if ref_path is None:
        ref_path = next((resolve(r.checkpoint) for r in peeks.values() if r.checkpoint
                         and (is_pretrained(r.checkpoint) or Path(r.checkpoint).is_file())), None)
    ref = None
    if ref_path:  # the one read and load of the reference per command; its runners all come from it
        content = checked.get(ref_path) or Path(ref_path).read_bytes()
        make_runner, record = checkpoint_opener(Path(ref_path), content)
        ref = Reference(str(ref_path), record, make_runner=make_runner)
        peeks[ref_path] = record
    check_memory(list(peeks.values()), cfg.batches)
    data = cfg.data or next((d for d in (r.dataset for r in ([ref.record] if ref else []) +
                                         list(peeks.values())) if d), None)
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
            with ref.make_runner(cfg.runner_options(routing=True)) as runner:
                ref.logits, ref.routes = predict_all(runner, images, routes=True)
    else:
        logger.info("note: no dataset known (no sidecar, no --data): accuracy and fidelity are skipped")
    provenance = reference_match(peeks, ref.path) if ref is not None and ref.logits is not None else {}
    for p, (_, note) in provenance.items():
        if note:
            logger.info(f"note: {Path(p).name}: {note}")
    if cfg.isolate:
        entries = bench_isolated(paths, cfg, images, labels, ref)
    else:  # one artifact at a time, so each memory figure is as much its own as one process allows
        entries = (_in_process(p, cfg, images, labels, ref) for p in paths)
    names = table_labels(paths)
    report["failed"] = []
    for p, entry in zip(paths, entries):
        if "error" in entry:  # deleted mid-run, garbage behind a right suffix...: reported, the rest kept
            report["failed"].append({"artifact": p, "label": names[p], "error": printable(entry["error"])})
            logger.info(f"error: {names[p]}: {printable(entry['error'])}")
            continue
        entry["label"] = names[p]
        match, note = provenance.get(p, (None, None))
        entry["reference_match"] = match
        if note:
            entry["notes"].append(note)
        report["artifacts"].append(entry)
        report["rows"] += [row(entry, int(b), stats) for b, stats in entry["latency"].items()]
    return report


def _readable(path: str, fmt: str) -> None:
    """A file that cannot be an artifact is refused before anything is measured: unreadable, empty, or an
    .onnx whose first byte is not a serialized ModelProto's (field 1, ir_version, a varint: 0x08; onnx writes
    fields in number order). What passes and still fails later is that artifact's error in the report."""
    try:
        with open(path, "rb") as f:
            head = f.read(1)
    except OSError as e:
        raise OSError(f"{printable(path)}: cannot be read ({e.strerror or e}); nothing was measured") from None
    if not head:
        raise ValueError(f"{printable(path)} is empty; nothing was measured")
    if fmt == "onnxruntime" and path.endswith(".onnx") and head != b"\x08":
        raise ValueError(f"{printable(path)} is not an ONNX model (no ModelProto header); nothing was measured")


def _in_process(path: str, cfg: BenchConfig, images, labels, ref: Reference | None) -> dict:
    """`bench_artifact` in this process; an artifact that fails is an entry with its one-line `error`."""
    try:
        return bench_artifact(path, cfg, images, labels, ref)
    except (OSError, ValueError, RuntimeError) as e:  # InputError is a ValueError: the artifact's own fault
        return {"artifact": path, "error": first_line(e)}


def table_labels(paths: list[str]) -> dict[str, str]:
    """Each artifact's name in the table: its file name, or the path as given where two files share a name (in
    different folders), with control characters escaped (a name is anyone's to choose)."""
    names = [label(Path(p)) for p in paths]
    return {p: printable(p if names.count(n) > 1 else n) for p, n in zip(paths, names)}


def reference_match(peeks: dict[str, ArtifactRecord], ref_path: str) -> dict[str, tuple[bool | None, str | None]]:
    """Per artifact: whether it was built from the reference checkpoint (by sha256; None when its record
    does not say), and a note when not, since its agreement and routing then compare two different models."""
    ref_sha = peeks[ref_path].checkpoint_sha256
    if ref_sha is None:
        return {}
    out: dict[str, tuple[bool | None, str | None]] = {}
    for p, rec in peeks.items():
        sha = rec.checkpoint_sha256
        if rec.random_weights:
            out[p] = (False, "random weights (built without a checkpoint): agreement with the reference is "
                             "meaningless")
        elif sha is None:
            out[p] = (None, None)
        elif sha == ref_sha:
            out[p] = (True, None)
        else:
            out[p] = (False, f"built from {rec.checkpoint or p} (sha256 {sha[:12]}), not from the reference "
                             f"{ref_path} ({ref_sha[:12]}): agreement and routing compare two different models")
    return out


def _check_writable(option: str, folder: Path) -> None:
    """A folder the report cannot go to is refused before minutes of measuring, not after."""
    from ..artifacts.outputs import check_writable

    try:
        check_writable(folder, "the folder of")
    except OSError as e:
        raise OSError(f"{option}: {e}; nothing was measured") from None


def bench_and_save(paths: list[str], cfg: BenchConfig, json_path: str | Path | None = None,
                   plot_dir: str | Path | None = None) -> dict:
    """`mlit-edge bench`: refuse an output that cannot be written before measuring, bench, then save."""
    if json_path and not Path(json_path).resolve().parent.is_dir():
        raise FileNotFoundError(f"--json {json_path}: folder {Path(json_path).parent} does not exist")
    for option, folder in (("--json", Path(json_path).resolve().parent if json_path else None),
                           ("--plot", Path(plot_dir) if plot_dir else None)):
        if folder is not None:
            _check_writable(option, folder)
    report = run_bench(paths, cfg)
    save_report(report, json_path, plot_dir)  # with every artifact that was measured, and what failed
    return report


def failures(report: dict) -> str | None:
    """One line naming the artifacts that could not be benched (None when all were), for the exit status."""
    failed = report.get("failed") or []
    if not failed:
        return None
    names = "; ".join(f"{f['label']}: {f['error']}" for f in failed)
    return f"{len(failed)} of {len(failed) + len(report['artifacts'])} artifacts could not be benched ({names})"
