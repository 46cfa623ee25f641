"""Weights for sharing, in the convention of timm and the Hugging Face hub: `model.safetensors` (the tensors
and nothing else: no pickle, so nothing in it can run code) beside `config.json` (the model's config, its
classes and preprocessing, what it was made from, and the sha256 of `model.safetensors`).

The shipped pretrained models are such pairs (`mlit_edge/weights/NAME/`); `mlit-edge export-weights CKPT
--out DIR` writes one from any checkpoint, and `tools/publish_pretrained.py` uses the same writer. Training
checkpoints stay `.pt` dicts (`checkpoint`), since resuming needs the optimizer's state.
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

from .. import __version__

WEIGHTS_FILE = "model.safetensors"
CONFIG_FILE = "config.json"
FORMAT = "mlit-edge-weights"
FORMAT_VERSION = 1
KEPT = ("kind", "size", "config", "data", "epoch", "metrics")  # what a checkpoint keeps beside its tensors


class WeightsError(ValueError):
    """A weights pair that is not one mlit-edge wrote, or whose files disagree."""


def is_safetensors(content: bytes) -> bool:
    """Whether `content` is a safetensors file: an 8-byte little-endian header length, then a JSON header."""
    return len(content) > 9 and content[8:9] == b"{" and int.from_bytes(content[:8], "little") <= len(content) - 8


def _write_atomic(path: Path, data: bytes) -> None:
    import os

    from ..runtime.sidecar import atomic_path

    with atomic_path(path) as tmp:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())


def write_weights(ckpt: dict, out: str | Path, provenance: dict) -> dict:
    """Write `ckpt`'s weights as `out/model.safetensors` and the rest of what loaders use as `out/config.json`
    (each written to a temporary file, then renamed); returns the config. `provenance` says what it was made
    from (the checkpoint's path and sha256, the command)."""
    from safetensors.torch import save

    # a clone per tensor: safetensors refuses tensors that share memory, and the values stay bit for bit
    blob = save({k: v.detach().clone().contiguous() for k, v in ckpt["model"].items()}, metadata={"format": "pt"})
    config = {"format": FORMAT, "format_version": FORMAT_VERSION, "mlit_edge_version": __version__,
              **{k: ckpt[k] for k in KEPT if k in ckpt},
              "weights": {"file": WEIGHTS_FILE, "sha256": hashlib.sha256(blob).hexdigest(), "bytes": len(blob)},
              "provenance": provenance}
    text = json.dumps(config, indent=1) + "\n"  # before any file: a value JSON cannot hold fails here
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    _write_atomic(out / WEIGHTS_FILE, blob)
    _write_atomic(out / CONFIG_FILE, text.encode())
    return config


def read_config(weights: Path) -> bytes:
    """The bytes of the `config.json` beside a `model.safetensors`."""
    path = weights.parent / CONFIG_FILE
    if not path.is_file():
        raise WeightsError(f"refused {weights}: no {CONFIG_FILE} beside it (the model's config, classes and "
                           "preprocessing); export the pair with mlit-edge export-weights")
    return path.read_bytes()


def checkpoint_fields(weights: Path, content: bytes, config_bytes: bytes) -> dict:
    """What a checkpoint dict holds, from a weights pair: the fields of `config.json` and the tensors of
    `content`, read with safetensors (never torch.load) once its sha256 matches the one the config records."""
    from safetensors import SafetensorError
    from safetensors.torch import load

    try:
        config = json.loads(config_bytes)
    except (UnicodeDecodeError, ValueError) as e:
        raise WeightsError(f"refused {weights}: its {CONFIG_FILE} is not JSON ({e})") from None
    if not isinstance(config, dict) or config.get("format") != FORMAT:
        raise WeightsError(f"refused {weights}: its {CONFIG_FILE} is not an mlit-edge weights config (no "
                           f"'{FORMAT}' marker)")
    if not isinstance(config.get("format_version"), int) or config["format_version"] > FORMAT_VERSION:
        raise WeightsError(f"{weights} was written by a newer mlit-edge ({config.get('mlit_edge_version')}); upgrade")
    recorded = (config.get("weights") or {}).get("sha256") if isinstance(config.get("weights"), dict) else None
    if hashlib.sha256(content).hexdigest() != recorded:
        raise WeightsError(f"refused {weights}: it does not match the sha256 its {CONFIG_FILE} records (the file "
                           "was changed, damaged or paired with another model's config)")
    try:
        tensors = load(content)
    except (SafetensorError, ValueError, RuntimeError) as e:
        raise WeightsError(f"refused {weights}: not a readable safetensors file ({e})") from None
    fields = {k: config[k] for k in KEPT if k in config}
    return {**fields, "mlit_edge_version": config.get("mlit_edge_version"), "model": tensors,
            "weights_provenance": config.get("provenance")}
