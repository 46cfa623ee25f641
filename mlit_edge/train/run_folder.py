"""What a run folder must hold before training continues in it: a checkpoint of the same model, data and
labelled subset, a folder that can be written, and a metrics log without the epochs the checkpoint lacks."""
from __future__ import annotations

import json
import os
from pathlib import Path

from ..base.textfile import LOG_BYTES, read_text
from . import checkpoint as ck
from .data import ImageSet, describe_subset


def same_dataset(a: str, b: str) -> bool:
    """Whether two datasets' names are one dataset: an ImageFolder (`imagefolder:PATH`) by its resolved path,
    so a run started on a relative path resumes on the absolute one (or through a link) and the reverse."""
    prefix = "imagefolder:"
    if a.startswith(prefix) and b.startswith(prefix):
        return os.path.realpath(a[len(prefix):]) == os.path.realpath(b[len(prefix):])
    return a == b


def check_resume(ckpt: dict, kind: str, cfg, size: str, data: ImageSet, path: Path, subset: dict | None = None,
                 epochs: int | None = None) -> None:
    """Refuse to continue a checkpoint of another model, task, dataset or labelled subset, one without the
    training state a resume needs (a published, weights-only model), or one already `epochs` long."""
    # through config_from_dict, so that a field added since the checkpoint was written compares at its default
    same_config = ckpt["kind"] == kind and ck.config_to_dict(ck.config_from_dict(kind, ckpt["config"])) == \
        ck.config_to_dict(cfg)
    if ckpt.get("subset") != subset:
        raise ck.CheckpointError(f"{path} was trained on another labelled subset ({describe_subset(ckpt.get('subset'))}"
                                 f"; this run: {describe_subset(subset)}). Use another --out, or the same "
                                 "--labels-per-class and --subset-seed")
    if not same_config or not same_dataset(ckpt["data"]["name"], data.name):
        raise ck.CheckpointError(f"{path} holds a {ck.describe_checkpoint(ckpt)}; this run is {kind}-{size} on {data.name}. "
                                 "Use another --out, or drop --resume to start a new run elsewhere")
    missing = [k for k in ("optimizer", "scheduler", "rng") if not isinstance(ckpt.get(k), (dict, list))]
    if missing:
        raise ck.CheckpointError(f"{path} holds no training state to resume ({', '.join(missing)} missing): it is "
                                 "a published model. Fine-tune or evaluate it instead, or start a new run elsewhere")
    epoch = ckpt.get("epoch")
    if not isinstance(epoch, int) or isinstance(epoch, bool) or epoch < 1:
        raise ck.CheckpointError(f"{path}: its epoch is {epoch!r}, not a count of finished epochs; "
                                 "it was not written by mlit-edge train (or was edited)")
    if epochs is not None and epoch >= epochs:
        raise ck.CheckpointError(f"{path} has already finished {epoch} epochs, and this run asks for {epochs}; "
                                 "raise --epochs to train on")


def clean_start(out: Path, log: Path, resume: bool) -> list[str]:
    """Prepare a run folder for this start; returns what was done, for the log.

    The hidden temporaries a killed run leaves (a half-written checkpoint or plot) are removed. A fresh
    run (no --resume; there is no checkpoint, or the start was refused) moves an earlier `metrics.jsonl`
    aside to `metrics.N.jsonl` instead of appending to it, so one log never mixes two runs and none is lost.
    """
    done = []
    for stale in sorted(out.glob(".*.tmp")) + sorted(out.glob(".write-test-*")) + sorted(out.glob("*.jsonl.tmp")):
        stale.unlink(missing_ok=True)
        done.append(f"removed {stale.name}, left by a run that was killed")
    if not resume and log.exists():
        n = 1
        while (aside := log.with_name(f"{log.stem}.{n}{log.suffix}")).exists():
            n += 1
        os.replace(log, aside)
        done.append(f"a fresh run: the earlier {log.name} (no checkpoint to resume) is kept as {aside.name}")
    return done


def rewrite_log(path: Path, keep_below_epoch: int) -> list[dict]:
    """Drop log lines of epochs that the checkpoint does not hold (they will be redone), and a line torn by
    a kill or a full disk (it cannot be read back)."""
    if not path.exists():
        return []
    rows = []
    for line in read_text(path, "metrics log", LOG_BYTES, errors="replace").splitlines():
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(row, dict) and isinstance(row.get("epoch"), int):
            rows.append(row)
    rows = [r for r in rows if r["epoch"] < keep_below_epoch]
    tmp = path.with_suffix(".jsonl.tmp")
    tmp.write_text("".join(json.dumps(r) + "\n" for r in rows))
    os.replace(tmp, path)
    return rows
