"""The folder a build writes into: one writer at a time, nothing good replaced by accident, nothing
left behind by a refused or killed build.

- `output_folder` locks the folder (flock on the directory itself, released when the process dies),
  finishes or drops what a killed writer left (pending sidecars, hidden temporaries), and removes the
  folder again when it created it and the work failed before writing anything.
- `guard_replace` refuses to replace an artifact that came from another source (another
  checkpoint's sha256, random weights over trained ones, a file without a sidecar) unless forced.
"""
from __future__ import annotations

import contextlib
import errno
import fcntl
import logging
import os
import tempfile
from pathlib import Path
from typing import Iterator

from .targets import FORMATS, TABLE
from .schema import ArtifactRecord, recorded
from .sidecar import recover_publishes

logger = logging.getLogger(__name__)

# what appears in the temporaries of what builds write: their artifacts and calibration manifests
ARTIFACT_MARKS = (*dict.fromkeys(s for t in TABLE.values() for s in FORMATS[t.format].suffixes), ".calib.json")


def check_writable(folder: str | Path, what: str) -> None:
    """Make `folder` if missing and write and remove a temporary file in it, so that a folder that cannot be
    written fails before the work, not after; OSError "cannot write WHAT FOLDER (reason)" otherwise."""
    try:
        Path(folder).mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=folder, prefix=".write-test-"):
            pass
    except OSError as e:
        existing, _ = _ancestry(Path(folder))  # mkdir says only "File exists" or "Not a directory"
        blocker = existing if existing is not None and not existing.is_dir() else None
        raise OSError(f"cannot write {what} {folder} "
                      f"({f'{blocker} is a file, not a folder' if blocker else e.strerror or e})") from None


def _ancestry(folder: Path) -> tuple[Path | None, Path | None]:
    """The nearest of `folder` and its parents that exists, and the highest that does not: what
    `mkdir(parents=True)` makes first (None when `folder` exists)."""
    missing = None
    for p in (folder, *folder.parents):
        if p.exists():
            return p, missing
        missing = p
    return None, missing


@contextlib.contextmanager
def _locked(folder: Path) -> Iterator[None]:
    fd = os.open(folder, os.O_RDONLY)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as e:
            if e.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):
                raise
            logger.info(f"waiting for another mlit-edge process writing to {folder} ...")
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing the descriptor releases the lock


@contextlib.contextmanager
def output_folder(folder: str | Path) -> Iterator[Path]:
    """`folder`, created if needed and locked for this writer; see the module docstring."""
    folder = Path(folder)
    _, top = _ancestry(folder)
    try:
        check_writable(folder, "to the output folder")  # a file in the way, a read-only folder: before any work
        with _locked(folder):
            for line in recover_publishes(folder):
                logger.info(f"{folder}: {line} (a build was interrupted there)")
            stale = [p for p in folder.glob(".*.tmp") if p.is_file() and any(s in p.name for s in ARTIFACT_MARKS)]
            for p in stale:  # under the lock no other build is alive, so its temporaries are stale
                p.unlink(missing_ok=True)
            if stale:
                logger.info(f"removed {len(stale)} temporary file(s) that an interrupted build left in {folder}")
            yield folder
    except BaseException:
        if top is not None:  # a refused build leaves no empty folder behind, nor the empty parents it made
            _remove_empty(folder, top)
        raise


def _remove_empty(folder: Path, top: Path) -> None:
    """Remove `folder` and its parents, up to `top` (the first this writer made), while each is empty."""
    for p in (folder, *folder.parents):
        if not p.is_dir() or any(p.iterdir()):
            return
        p.rmdir()
        if p == top:
            return


def source_of(record: ArtifactRecord) -> tuple:
    """What an artifact was made from: its checkpoint's sha256, or random weights of a given model."""
    if record.checkpoint_sha256:
        return ("checkpoint", record.checkpoint_sha256)
    if record.random_weights:
        return ("random weights", record.size)
    return ("unknown", record.source_onnx_sha256)


def describe_source(record: ArtifactRecord) -> str:
    kind, value = source_of(record)
    if kind == "checkpoint":
        return f"checkpoint {record.checkpoint or '?'} (sha256 {value[:12]})"
    return f"random weights ({value or 'unknown size'})" if kind == "random weights" else "an unknown source"


def guard_replace(path: str | Path, new: ArtifactRecord, force: bool = False) -> None:
    """Refuse (one line) to replace `path` with an artifact of another source than the one it holds."""
    path = Path(path)
    if force or not path.exists():
        return
    try:
        old = recorded(path, verify_hash=False)
    except (OSError, ValueError):
        raise FileExistsError(f"{path} exists and has no readable mlit-edge sidecar; pass --force to replace it, "
                              "or choose another --out") from None
    if source_of(old) != source_of(new):
        raise FileExistsError(f"{path} holds a model built from {describe_source(old)}; this build is from "
                              f"{describe_source(new)}. Pass --force to replace it, or choose another --out")
