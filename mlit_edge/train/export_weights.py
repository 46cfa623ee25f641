"""`mlit-edge export-weights CKPT --out DIR`: a checkpoint's weights as the pair timm and the Hugging Face hub
share (`DIR/model.safetensors` + `DIR/config.json`, `weights_file`), with what it was made from: the
checkpoint's path and the sha256 of the bytes that were read. The optimizer and the other resume state stay
behind; `--checkpoint DIR/model.safetensors` then works wherever a checkpoint is taken."""
from __future__ import annotations

from pathlib import Path

from .checkpoint import read_checkpoint
from .weights_file import CONFIG_FILE, WEIGHTS_FILE, write_weights


def export_weights(checkpoint: str, out: str | Path, force: bool = False) -> dict:
    """Write the weights pair of `checkpoint` (a path or `pretrained:NAME`) into folder `out`; returns its config."""
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise FileExistsError(f"--out {out} is a file; give a folder for {WEIGHTS_FILE} and {CONFIG_FILE}")
    there = [n for n in (WEIGHTS_FILE, CONFIG_FILE) if (out / n).exists()]
    if there and not force:
        raise FileExistsError(f"--out {out} already holds {', '.join(there)}; pass --force to replace them")
    ckpt, sha = read_checkpoint(checkpoint)
    provenance = {"checkpoint": str(checkpoint), "checkpoint_sha256": sha,
                  "command": f"mlit-edge export-weights {checkpoint} --out {out}"}
    return write_weights(ckpt, out, provenance)
