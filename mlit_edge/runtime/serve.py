"""Classifying files: `predict_files` for the CLI, `watch` for an always-on inbox on a device.

Nothing that appears in the inbox can stop the loop. A file is read only once its size and
modification time have held still for `settle_s`; names that start with "." or end in a temporary
suffix are never read, so the safe way to drop a file is to write it under such a name and rename
it into place (`cp a.jpg inbox/.a.jpg && mv inbox/.a.jpg inbox/`). A file that does not decode is
tried again until it has held still for `retry_s` (a slow writer may still be filling it), then
moved to `failed/` with its reason; a file that vanishes is skipped; any other per-file failure is
recorded and the file moved to `failed/`, so a bad file cannot crash the service in a loop. Each image
gets exactly one row, across kill -9, a rotated results file and an unwritable `done/` (`inbox.py`); a
file is claimed (moved into processing/) before it is opened, and its row records the bytes classified.
"""
from __future__ import annotations

import hashlib
import os
import stat
import time
from pathlib import Path
from typing import Callable, Iterable

import numpy as np

from .classifier import Classifier
from ..base.compat import is_relative_to
from .images import DEFAULT_MAX_PIXELS, InputError, decode_image
from .inputs import expand_name, is_video
from .inbox import FOLDERS, ResultsLog, claim, give_back, lock, make_folders, recover_claims, say, settle
from ..base.messages import file_kind, printable, typed_line

TEMPORARY_SUFFIXES = (".tmp", ".part", ".partial", ".crdownload", ".swp", "~")
SETTLE_S = 1.0  # [ours] unchanged this long before a file is read
RETRY_S = 10.0  # [ours] a file that does not decode is retried until unchanged this long


def predict_files(model: str | Path, paths: Iterable[str | Path], top_k: int = 1,
                  max_pixels: int | None = DEFAULT_MAX_PIXELS, force: bool = False) -> list[dict]:
    """One JSON-able result per file (`Prediction.to_dict()`); a folder or a glob stands for its image files, as
    in `predict(source=...)` (`inputs.expand_name`). A file that cannot be read, a folder without images and a
    glob that matches nothing each get an "error" and the rest go on. `force`: run a plan built on another Jetson
    module (`Classifier.load`)."""
    files: list[tuple[str, str | None]] = []  # each file, and why it cannot be classified (None: it can)
    for name in paths:
        try:
            named = [name] if is_video(name) else expand_name(name)  # a URI is not a file name, nor a glob
            files += [(str(f), f"{printable(f)}: a video, a camera or a stream; classify its frames with mlit-edge "
                       "stream" if is_video(f) else None) for f in named]
        except InputError as e:
            files.append((str(name), str(e)))
    out = []
    with Classifier.load(model, max_pixels=max_pixels, force=force) as clf:
        for i, (path, error) in enumerate(files):
            if error is None:
                try:
                    pred = clf.predict([path], top_k)[0]
                    pred.index = i
                    out.append(pred.to_dict())
                    continue
                except InputError as e:
                    error = str(e)
            out.append({"path": path, "error": error})
    return out


def _candidates(inbox: Path) -> list[tuple[Path, tuple[int, int]]]:
    """The inbox's readable regular files with their (size, mtime): one directory scan, one stat each."""
    try:
        scan = os.scandir(inbox)
    except OSError:  # the inbox itself vanished or is unreadable: try again on the next poll
        return []
    out = []
    with scan:
        for entry in scan:
            name = entry.name
            if name.startswith(".") or name.endswith(TEMPORARY_SUFFIXES) or name in FOLDERS:
                continue
            try:
                if not entry.is_file():  # follows links: a FIFO, a device or a folder is never opened
                    continue
                st = entry.stat()
            except OSError:
                continue
            out.append((Path(entry.path), (st.st_size, st.st_mtime_ns)))
    out.sort()
    return out


def read_claimed(claimed: Path, label: Path, max_pixels: int | None) -> tuple[np.ndarray, dict]:
    """A claimed file's pixels and the identity of the bytes they came from (inode, size, mtime_ns, sha256),
    both through one descriptor, so the row describes exactly the file that was classified. InputError
    (named `label`) for what is not an image, or a file that changed while it was read."""
    fd = os.open(claimed, os.O_RDONLY | os.O_NONBLOCK)  # a FIFO put in its place must not block the open
    with os.fdopen(fd, "rb") as fh:
        before = os.fstat(fd)
        if not stat.S_ISREG(before.st_mode):
            raise InputError(f"{label} {file_kind(before.st_mode)}")
        image = decode_image(fh, label, max_pixels, keep_grey=True)
        fh.seek(0)
        digest = hashlib.sha256()
        while chunk := fh.read(1 << 20):
            digest.update(chunk)
        after = os.fstat(fd)
    if (after.st_size, after.st_mtime_ns) != (before.st_size, before.st_mtime_ns):
        raise InputError(f"{label}: changed while it was read")
    return image, {"bytes": after.st_size, "inode": after.st_ino, "mtime_ns": after.st_mtime_ns,
                   "sha256": digest.hexdigest()}


def classify_file(clf: Classifier, claimed: Path, label: Path, stable_for: float,
                  retry_s: float) -> tuple[dict, str] | None:
    """(result row, "done" | "failed") for a claimed file, or None when it vanished or may still be being
    written. `label` is its path in the inbox, for the row and the errors."""
    try:
        image, identity = read_claimed(claimed, label, clf.max_pixels)
        pred = clf.predict([image])[0]
        return {"path": label.name, "class_id": pred.class_id, "name": pred.name, "prob": pred.prob,
                **identity}, "done"
    except (InputError, OSError) as e:
        if not claimed.exists():
            return None
        if stable_for < retry_s:
            return None  # perhaps still being written: try again on a later poll
        return {"path": label.name, "error": str(e) if isinstance(e, InputError) else
                f"cannot read it: {e.strerror or e}"}, "failed"
    except Exception as e:  # anything else about this one file: record it, and keep serving
        return {"path": label.name, "error": f"internal error: {typed_line(e, 200)}"}, "failed"


def watch(model: str | Path, inbox: str | Path, results: str | Path, interval_s: float = 0.5,
          max_files: int | None = None, settle_s: float = SETTLE_S, retry_s: float = RETRY_S,
          max_pixels: int | None = DEFAULT_MAX_PIXELS, clock: Callable[[], float] = time.monotonic) -> int:
    """A small always-on service: classify each new image in `inbox`, append a JSON line to `results`,
    and move the image to `inbox/done` (or `inbox/failed`), each image recorded exactly once (`inbox.py`
    says how). Returns the number handled (runs until killed unless `max_files` is given)."""
    inbox, results = Path(inbox), Path(results)
    inbox.mkdir(parents=True, exist_ok=True)
    if is_relative_to(results.resolve().parent, inbox.resolve()):
        raise ValueError(f"--results {results} is inside the inbox {inbox}: it would be taken for an image; "
                         "put it beside the inbox")
    with lock(inbox), Classifier.load(model, max_pixels=max_pixels) as clf:
        log = ResultsLog(results)
        try:
            make_folders(inbox)
            recover_claims(inbox, log)
            return _serve(clf, inbox, log, interval_s, max_files, settle_s, retry_s, clock)
        finally:
            log.close()


def _serve(clf: Classifier, inbox: Path, log: ResultsLog, interval_s: float, max_files: int | None,
           settle_s: float, retry_s: float, clock: Callable[[], float]) -> int:
    seen: dict[str, tuple[tuple[int, int], float]] = {}  # name -> ((size, mtime), unchanged since)
    stuck: dict[str, tuple[int, int]] = {}  # name -> the (size, mtime) at which it could not be claimed
    handled = 0
    while max_files is None or handled < max_files:
        make_folders(inbox)  # again each poll: someone may have removed one
        now, ready = clock(), []
        files = _candidates(inbox)
        for f, key in files:
            if f.name not in seen or seen[f.name][0] != key:
                seen[f.name] = (key, now)  # new or still changing: wait for it to settle
            elif now - seen[f.name][1] >= settle_s and stuck.get(f.name) != key:
                ready.append(f)
        names = {f.name for f, _ in files}
        seen = {name: v for name, v in seen.items() if name in names}
        before = handled
        for f in ready:
            try:  # claimed before it is opened: a file renamed onto its name from now on is another file
                claim_id, claimed = claim(inbox, f)
            except FileNotFoundError:  # vanished since the scan: nothing to record
                continue
            except OSError as e:
                if f.name not in stuck:
                    say(f"cannot move {f.name} into processing/ ({e.strerror or e}); it stays in the inbox, "
                        "unrecorded, until it changes")
                stuck[f.name] = seen[f.name][0]
                continue
            outcome = classify_file(clf, claimed, f, now - seen[f.name][1], retry_s)
            if outcome is None:
                give_back(inbox, claimed, f.name)
                continue
            row, where = outcome
            try:
                log.write({"time": time.strftime("%Y-%m-%dT%H:%M:%S%z"), **row, "id": claim_id})
            except OSError as e:  # e.g. a full disk: nothing of the row stays; give the file back for later
                say(f"cannot record {f.name} ({e.strerror or e}); will retry")
                give_back(inbox, claimed, f.name)
                continue
            settle(inbox, claimed, f.name, where)
            seen.pop(f.name, None)
            handled += 1
            if max_files is not None and handled >= max_files:
                break
        if handled == before:
            time.sleep(interval_s)
    return handled
