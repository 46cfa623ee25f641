"""What a run folder must hold before training continues in it: a checkpoint of the same model, data and
labelled subset, a folder that can be written, and a metrics log without the epochs the checkpoint lacks."""
from __future__ import annotations

import json
import os
from pathlib import Path

from . import checkpoint as ck
from .data import ImageSet, describe_subset


def check_resume(ckpt: dict, kind: str, cfg, size: str, data: ImageSet, path: Path, subset: dict | None = None) -> None:
    """Refuse to continue a checkpoint of another model, task, dataset or labelled subset."""
    # through config_from_dict, so that a field added since the checkpoint was written compares at its default
    same_config = ckpt["kind"] == kind and ck.config_to_dict(ck.config_from_dict(kind, ckpt["config"])) == \
        ck.config_to_dict(cfg)
    if ckpt.get("subset") != subset:
        raise ck.CheckpointError(f"{path} was trained on another labelled subset ({describe_subset(ckpt.get('subset'))}"
                                 f"; this run: {describe_subset(subset)}). Use another --out, or the same "
                                 "--labels-per-class and --subset-seed")
    if not same_config or ckpt["data"]["name"] != data.name:
        raise ck.CheckpointError(f"{path} holds a {ck.describe(ckpt)}; this run is {kind}-{size} on {data.name}. "
                                 "Use another --out, or drop --resume to start a new run elsewhere")


def check_writable(out: Path) -> None:
    """Fail before the first step, not after the first epoch, when the run folder cannot be written."""
    import tempfile

    try:
        out.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=out, prefix=".write-test-"):
            pass
    except OSError as e:
        raise OSError(f"cannot write the run folder {out}: {e.strerror or e}") from None


def rewrite_log(path: Path, keep_below_epoch: int) -> list[dict]:
    """Drop log lines of epochs that the checkpoint does not hold (they will be redone)."""
    if not path.exists():
        return []
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    rows = [r for r in rows if r["epoch"] < keep_below_epoch]
    tmp = path.with_suffix(".jsonl.tmp")
    tmp.write_text("".join(json.dumps(r) + "\n" for r in rows))
    os.replace(tmp, path)
    return rows
