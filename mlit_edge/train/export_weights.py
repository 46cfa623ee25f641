"""`mlit-edge export-weights CKPT --out DIR`: a checkpoint's weights as the pair timm and the Hugging Face hub
share (`DIR/model.safetensors` + `DIR/config.json`, `weights_file`, with timm's keys) and a model card
(`DIR/README.md`, with the metrics the checkpoint records), with what it was made from: the
checkpoint's path and the sha256 of the bytes that were read. The optimizer and the other resume state stay
behind; `--checkpoint DIR/model.safetensors` then works wherever a checkpoint is taken.

The pair is checked as eval checks it (`checkpoint.model_from_checkpoint`) before anything is written, and
published as a pair under the folder's lock (`artifacts.outputs.output_folder`), which first finishes or drops
what a killed run left there: a pending config, hidden temporaries."""
from __future__ import annotations

import logging
import os
from pathlib import Path

from ..base.messages import not_a_file, printable
from ..artifacts.outputs import output_folder
from .checkpoint import checked_model, read_checkpoint
from .model_card import CARD_FILE
from .weights_file import CONFIG_FILE, WEIGHTS_FILE, stale_temporaries, write_weights

logger = logging.getLogger(__name__)


def export_weights(checkpoint: str, out: str | Path, force: bool = False) -> dict:
    """Write the weights pair of `checkpoint` (a path or `pretrained:NAME`) into folder `out`; returns its config."""
    if not os.fspath(out).strip():  # Path("") is ".": the pair would land in whatever folder this runs in
        raise ValueError(f"--out {printable(repr(os.fspath(out)))} names no folder; give the folder for "
                         f"{WEIGHTS_FILE} and {CONFIG_FILE}")
    out = Path(out)
    if out.exists() and not out.is_dir():
        kind = not_a_file(out) or "is a file"
        raise FileExistsError(f"--out {printable(out)} {kind}; give a folder for {WEIGHTS_FILE} and {CONFIG_FILE}")
    there = [n for n in (WEIGHTS_FILE, CONFIG_FILE, CARD_FILE) if (out / n).exists()]  # the card is replaced too
    if there and not force:
        raise FileExistsError(f"--out {printable(out)} already holds {', '.join(there)}; pass --force to replace them")
    ckpt, sha = read_checkpoint(checkpoint)
    checked_model(ckpt, checkpoint)  # what eval would refuse is not published
    provenance = {"checkpoint": str(checkpoint), "checkpoint_sha256": sha,
                  "command": f"mlit-edge export-weights {checkpoint} --out {out}"}
    with output_folder(out):  # locked: finishes a pair a kill tore, so its temporaries are stale
        stale = stale_temporaries(out)
        for p in stale:
            p.unlink(missing_ok=True)
        if stale:
            logger.info(f"removed {len(stale)} temporary file(s) that an interrupted export-weights left in "
                        f"{printable(out)}")
        return write_weights(ckpt, out, provenance)
