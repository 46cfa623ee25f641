"""Classifying files: `predict_files` for the CLI, `watch` for an always-on inbox on a device.

Nothing that appears in the inbox can stop the loop. A file is read only once its size and
modification time have held still for `settle_s`; names that start with "." or end in a temporary
suffix are never read, so the safe way to drop a file is to write it under such a name and rename
it into place (`cp a.jpg inbox/.a.jpg && mv inbox/.a.jpg inbox/`). A file that does not decode is
tried again until it has held still for `retry_s` (a slow writer may still be filling it), then
moved to `failed/` with its reason; a file that vanishes is skipped; any other per-file failure is
recorded and the file moved to `failed/`, so a bad file cannot crash the service in a loop.
"""
from __future__ import annotations

import json
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Callable, Iterable

from .classifier import Classifier
from .images import DEFAULT_MAX_PIXELS, InputError
from .messages import typed_line

TEMPORARY_SUFFIXES = (".tmp", ".part", ".partial", ".crdownload", ".swp", "~")
SETTLE_S = 1.0  # [ours] unchanged this long before a file is read
RETRY_S = 10.0  # [ours] a file that does not decode is retried until unchanged this long


def predict_files(model: str | Path, paths: Iterable[str | Path], top_k: int = 1,
                  max_pixels: int | None = DEFAULT_MAX_PIXELS) -> list[dict]:
    """One JSON-able result per file; a file that cannot be read gets an "error" and the rest go on."""
    out = []
    with Classifier.load(model, max_pixels=max_pixels) as clf:
        for p in paths:
            try:
                pred = clf.predict([p], top_k)[0]
                out.append({"path": str(p), **asdict(pred)})
            except InputError as e:
                out.append({"path": str(p), "error": str(e)})
    return out


def _candidates(inbox: Path) -> list[Path]:
    try:
        entries = sorted(inbox.iterdir())
    except OSError:  # the inbox itself vanished or is unreadable: try again on the next poll
        return []
    return [p for p in entries if not p.name.startswith(".") and not p.name.endswith(TEMPORARY_SUFFIXES)
            and p.is_file()]


def _free_name(folder: Path, name: str) -> Path:
    """`folder/name`, or `folder/stem-N.suffix` when a file of that name is already there (none is lost)."""
    dest, stem, suffix, n = folder / name, Path(name).stem, Path(name).suffix, 1
    while dest.exists():
        dest, n = folder / f"{stem}-{n}{suffix}", n + 1
    return dest


def classify_file(clf: Classifier, f: Path, stable_for: float, retry_s: float) -> tuple[dict, str] | None:
    """(result row, "done" | "failed"), or None when the file vanished or may still be being written."""
    try:
        pred = clf.predict([f])[0]
        return {"path": f.name, "class_id": pred.class_id, "name": pred.name, "prob": pred.prob}, "done"
    except InputError as e:
        if not f.exists():
            return None
        if stable_for < retry_s:
            return None  # perhaps still being written: try again on a later poll
        return {"path": f.name, "error": str(e)}, "failed"
    except Exception as e:  # anything else about this one file: record it, and keep serving
        return {"path": f.name, "error": f"internal error: {typed_line(e, 200)}"}, "failed"


def watch(model: str | Path, inbox: str | Path, results: str | Path, interval_s: float = 0.5,
          max_files: int | None = None, settle_s: float = SETTLE_S, retry_s: float = RETRY_S,
          max_pixels: int | None = DEFAULT_MAX_PIXELS, clock: Callable[[], float] = time.monotonic) -> int:
    """A small always-on service: classify each new image in `inbox`, append a JSON line to `results`,
    and move the image to `inbox/done` (or `inbox/failed`). Returns the number handled (runs until
    killed unless `max_files` is given)."""
    inbox, results = Path(inbox), Path(results)
    seen: dict[str, tuple[tuple[int, int], float]] = {}  # name -> ((size, mtime), unchanged since)
    handled = 0
    with Classifier.load(model, max_pixels=max_pixels) as clf, open(results, "a", buffering=1) as log:
        while max_files is None or handled < max_files:
            for d in (inbox / "done", inbox / "failed"):
                if (d.exists() or d.is_symlink()) and not d.is_dir():  # a file of that name: an image like any
                    moved = _free_name(inbox, d.name)  # other, renamed so the folder can be made
                    d.replace(moved)
                    print(f"mlit-edge serve: {d.name} in the inbox is a file; renamed it to {moved.name}",
                          file=sys.stderr)
                d.mkdir(parents=True, exist_ok=True)
            now, ready = clock(), []
            files = _candidates(inbox)
            for f in files:
                try:
                    st = f.stat()
                except OSError:
                    continue
                key = (st.st_size, st.st_mtime_ns)
                if f.name not in seen or seen[f.name][0] != key:
                    seen[f.name] = (key, now)  # new or still changing: wait for it to settle
                elif now - seen[f.name][1] >= settle_s:
                    ready.append(f)
            seen = {name: v for name, v in seen.items() if name in {f.name for f in files}}
            before = handled
            for f in ready:
                outcome = classify_file(clf, f, now - seen[f.name][1], retry_s)
                if outcome is None:
                    continue
                row, where = outcome
                try:
                    log.write(json.dumps({"time": time.strftime("%Y-%m-%dT%H:%M:%S%z"), **row}) + "\n")
                    f.replace(_free_name(inbox / where, f.name))
                except FileNotFoundError:  # vanished after it was classified: the row is written
                    pass
                except OSError as e:  # e.g. a full disk: leave the file for a later poll
                    print(f"mlit-edge serve: cannot record {f.name} ({e}); will retry", file=sys.stderr)
                    continue
                seen.pop(f.name, None)
                handled += 1
                if max_files is not None and handled >= max_files:
                    break
            if handled == before:
                time.sleep(interval_s)
    return handled
