"""Classifying files: `predict_files` for the CLI, `watch` for an always-on inbox on a device."""
from __future__ import annotations

import json
import time
from dataclasses import asdict
from pathlib import Path
from typing import Iterable

from .classifier import Classifier
from .images import InputError


def predict_files(model: str | Path, paths: Iterable[str | Path], top_k: int = 1) -> list[dict]:
    """One JSON-able result per file; a file that cannot be read gets an "error" and the rest go on."""
    out = []
    with Classifier.load(model) as clf:
        for p in paths:
            try:
                pred = clf.predict([p], top_k)[0]
                out.append({"path": str(p), **asdict(pred)})
            except InputError as e:
                out.append({"path": str(p), "error": str(e)})
    return out


def watch(model: str | Path, inbox: str | Path, results: str | Path, interval_s: float = 0.5,
          max_files: int | None = None) -> int:
    """A small always-on service: classify each new image in `inbox`, append a JSON line to `results`,
    and move the image to `inbox/done` (or `inbox/failed`). Returns the number handled (runs until
    killed unless `max_files` is given)."""
    inbox, results = Path(inbox), Path(results)
    done, failed = inbox / "done", inbox / "failed"
    for d in (done, failed):
        d.mkdir(parents=True, exist_ok=True)
    handled = 0
    with Classifier.load(model) as clf, open(results, "a", buffering=1) as log:
        while max_files is None or handled < max_files:
            files = sorted(p for p in inbox.iterdir() if p.is_file() and not p.name.startswith("."))
            if not files:
                time.sleep(interval_s)
                continue
            for f in files:
                try:
                    pred = clf.predict([f])[0]
                    row, dest = {"path": f.name, "class_id": pred.class_id, "name": pred.name, "prob": pred.prob}, done
                except InputError as e:
                    row, dest = {"path": f.name, "error": str(e)}, failed
                log.write(json.dumps({"time": time.strftime("%Y-%m-%dT%H:%M:%S%z"), **row}) + "\n")
                f.replace(dest / f.name)
                handled += 1
                if max_files is not None and handled >= max_files:
                    break
    return handled
