"""One fresh interpreter per artifact.

In one process the allocator hands memory freed by the reference or an earlier artifact to the next
one, so its load and run figures read near zero. A fresh interpreter per artifact gives each its own;
the reference's logits and routing are computed once by the parent and handed over in an .npz, in a
private `mlit-bench-*` folder in the temp folder. That folder is removed when the bench ends, on an error
or SIGTERM too (the children are sent SIGTERM first, and stop their `tegrastats`); one a SIGKILL left
behind is removed by the next bench: a live bench holds a lock on its folder's `.lock` (flock(2), released
by the kernel when its process dies, in whatever pid namespace), so a folder whose lock can be taken is stale.
"""
from __future__ import annotations

import contextlib
import fcntl
import importlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import asdict
from pathlib import Path
from typing import Iterator

import numpy as np

from ..artifacts.schema import ArtifactRecord
from ..base.messages import first_line, log_to_stderr
from ..base.textfile import LOG_BYTES, read_json
from ..base.terminate import EXIT_CODE, Terminated, end_process, sigterm_raises
from .one_artifact import bench_artifact
from .options import BenchConfig, Reference
from ..runtime.artifact import artifact_format

RUNTIME_MODULE = {"onnxruntime": "onnxruntime", "torch": "torch"}  # imported before the baseline is taken
PREFIX, LOCK = "mlit-bench-", ".lock"
CHILD_GRACE_S = 10.0  # [ours] a child on SIGTERM: its tegrastats gets base.terminate.GRACE_S of it


def _lock(folder: Path) -> int:
    """Lock `folder` as this process's: its `.lock` gets the name `sweep` looks for only once it is locked."""
    fresh = folder / (LOCK + ".new")
    fd = os.open(fresh, os.O_CREAT | os.O_WRONLY | os.O_EXCL, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX)
    os.replace(fresh, folder / LOCK)
    return fd


def sweep(temp: str | Path | None = None) -> list[Path]:
    """Remove the `mlit-bench-*` folders of benches that were killed (their lock is free); the ones removed."""
    removed = []
    for folder in Path(temp or tempfile.gettempdir()).glob(PREFIX + "*"):
        try:
            st = os.lstat(folder)
            if not folder.is_dir() or folder.is_symlink() or st.st_uid != os.getuid():
                continue  # not a folder this user's bench made
            fd = os.open(folder / LOCK, os.O_RDONLY | os.O_NOFOLLOW)
        except OSError:  # gone, not ours, or still being made (no .lock yet)
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:  # held: a bench running now
            os.close(fd)
            continue
        shutil.rmtree(folder, ignore_errors=True)
        os.close(fd)
        removed.append(folder)
    return removed


@contextlib.contextmanager
def scratch_folder() -> Iterator[Path]:
    """A private, locked `mlit-bench-*` folder in the temp folder, removed when the block ends (stale ones first)."""
    sweep()
    folder = Path(tempfile.mkdtemp(prefix=PREFIX))
    fd = None
    try:
        fd = _lock(folder)
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)
        if fd is not None:
            os.close(fd)


def _run_child(args: list[str]) -> int:
    """Run one child to its end; on an error or SIGTERM here, send it SIGTERM (so that it stops its tegrastats),
    then SIGKILL if it is still there `CHILD_GRACE_S` later."""
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL)  # its progress lines go to our stderr
    try:
        return proc.wait()
    except BaseException:
        end_process(proc, CHILD_GRACE_S)
        raise


def bench_isolated(paths: list[str], cfg: BenchConfig, images: np.ndarray | None, labels: np.ndarray | None,
                   ref: Reference | None) -> list[dict]:
    """`bench_artifact` for each path, each in its own child process; a child's failure is its entry's one-line
    `error` (the others are still measured and reported)."""
    entries = []
    with scratch_folder() as tmp:
        arrays = {}
        if images is not None:
            arrays.update(images=images, labels=labels)
        if ref is not None and ref.logits is not None:
            arrays["ref_logits"] = ref.logits
            arrays.update({f"ref_route_{i}": r for i, r in enumerate(ref.routes or [])})
        np.savez(tmp / "inputs.npz", **arrays)
        (tmp / "config.json").write_text(json.dumps({"bench": {**asdict(cfg), "batches": list(cfg.batches)},
                                                     "reference": str(Path(ref.path).resolve()) if ref else None}))
        for i, path in enumerate(paths):
            out = tmp / f"entry{i}.json"
            code = _run_child([sys.executable, "-m", "mlit_edge.bench.isolation", str(tmp),
                               str(Path(path).resolve()), str(out)])
            result = read_json(out, "bench result", LOG_BYTES) if out.is_file() else {}
            if code != 0 or "error" in result:  # this artifact's error; the others are still measured
                entries.append({"artifact": str(path),
                                "error": result.get("error") or f"bench process exited with {code}"})
                continue
            entry = result["entry"]
            entry["artifact"] = str(path)
            entries.append(entry)
    return entries


def worker(folder: str, path: str, out: str) -> int:
    """The child side: bench one artifact, write {"entry": ...} or {"error": ...}."""
    log_to_stderr()  # its progress lines reach the parent's stderr
    folder = Path(folder)
    try:
        sent = read_json(folder / "config.json", "bench config")
        raw = sent["bench"]
        cfg = BenchConfig(**{**raw, "batches": tuple(raw["batches"]),
                             "providers": tuple(raw["providers"]) if raw["providers"] else None, "isolate": True})
        module = RUNTIME_MODULE.get(artifact_format(path).name)
        if module:  # the runtime library itself is not the artifact's memory
            importlib.import_module(module)
        with np.load(folder / "inputs.npz") as z:
            arrays = {k: z[k] for k in z.files}
        ref = None
        if "ref_logits" in arrays:
            routes = [arrays[f"ref_route_{i}"] for i in range(sum(k.startswith("ref_route_") for k in arrays))]
            ref = Reference(sent["reference"] or "", ArtifactRecord(), arrays["ref_logits"], routes or None)
        entry = bench_artifact(path, cfg, arrays.get("images"), arrays.get("labels"), ref)
        result = {"entry": entry}
    except Exception as e:  # reported by the parent as one line
        result = {"error": first_line(e)}
    Path(out).write_text(json.dumps(result))
    return 1 if "error" in result else 0


def main(argv: list[str]) -> int:
    """The child's entry point: SIGTERM (from a parent that was ended) unwinds, so its tegrastats is stopped."""
    try:
        with sigterm_raises():
            return worker(*argv[:3])
    except Terminated:  # the parent is ending too, and says so
        return EXIT_CODE
    except KeyboardInterrupt:  # Ctrl-C reaches the whole foreground group: the parent says so
        return 130


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:4]))
