"""Weights for sharing, in the convention of timm and the Hugging Face hub: `model.safetensors` (the tensors
and nothing else: no pickle, so nothing in it can run code) beside `config.json` (the model's config, its
classes and preprocessing, what it was made from, and the sha256 of `model.safetensors`; with timm's keys,
`hub_config`) and the model card `README.md` (`model_card`).

The shipped pretrained models are such pairs (`mlit_edge/weights/NAME/`); `mlit-edge export-weights CKPT
--out DIR` writes one from any checkpoint, and `tools/publish_pretrained.py` uses the same writer. Training
checkpoints stay `.pt` dicts (`checkpoint`), since resuming needs the optimizer's state.
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

from .. import __version__
from ..base.messages import first_line, printable
from ..artifacts.sidecar import WEIGHTS_FORMAT, atomic_path, pending_of, publish_pair, temporary_beside
from ..base.textfile import METADATA_BYTES, parse_json, read_bytes
from .hub_config import timm_keys, timm_problem
from .model_card import CARD_FILE, model_card

WEIGHTS_FILE = "model.safetensors"
CONFIG_FILE = "config.json"
FORMAT = WEIGHTS_FORMAT
FORMAT_VERSION = 1
KEPT = ("kind", "size", "config", "data", "epoch", "metrics")  # what a checkpoint keeps beside its tensors
SUFFIX = ".safetensors"
# safetensors/src/tensor.rs (SafeTensors::read_metadata): MAX_HEADER_SIZE, the longest header it reads
MAX_HEADER = 100_000_000


class WeightsError(ValueError):
    """A weights pair that is not one mlit-edge wrote, or whose files disagree."""


def is_safetensors(content: bytes, path: str | Path | None = None) -> bool:
    """Whether `content` is to be read as safetensors: the name of its file, `path`, says so (`*.safetensors`,
    `.safetensors` too), or, when it is no torch.save file (a zip, or a pickle's 0x80 opcode), its 9th byte opens the
    JSON header that follows the 8-byte header length. A damaged header is then safetensors' to report."""
    if path is not None and Path(path).name.endswith(SUFFIX):
        return True
    return not content.startswith((b"PK", b"\x80")) and content[8:9] == b"{"


def header_problem(content: bytes) -> str | None:
    """What is wrong with the header of safetensors `content`, in safetensors' words with the numbers
    (None when it reads): an 8-byte little-endian length N, then N bytes of JSON that open with '{'
    (safetensors/src/tensor.rs, SafeTensors::read_metadata)."""
    if len(content) < 8:
        return f"header too small: the file holds {len(content)} bytes, fewer than the 8 of the header's length"
    n = int.from_bytes(content[:8], "little")
    if n > MAX_HEADER:
        return f"header too large: its length field says {n} bytes, and safetensors reads at most {MAX_HEADER}"
    if n > len(content) - 8:
        return (f"invalid header length: its length field says {n} bytes, but {len(content) - 8} follow "
                "(a truncated or damaged file)")
    if n == 0 or content[8:9] != b"{":
        return "invalid header start: the header is empty or does not open with '{'"
    return None


def write_weights(ckpt: dict, out: str | Path, provenance: dict, made_by: str | None = None) -> dict:
    """Write `ckpt`'s weights as `out/model.safetensors` and the rest of what loaders use as `out/config.json`
    (with timm's keys, `hub_config`), published as a pair (`artifacts.sidecar.publish_pair`: a kill leaves the old
    pair or the new, never a mix), then the model card `out/README.md` (`model_card`; `made_by`: the command that
    trained it, where known); returns the config. `provenance` says what it was made from (the checkpoint's path
    and sha256, the command)."""
    from safetensors.torch import save

    # a clone per tensor: safetensors refuses tensors that share memory, and the values stay bit for bit
    blob = save({k: v.detach().clone().contiguous() for k, v in ckpt["model"].items()}, metadata={"format": "pt"})
    config = {**timm_keys(ckpt), "format": FORMAT, "format_version": FORMAT_VERSION,
              "mlit_edge_version": __version__, **{k: ckpt[k] for k in KEPT if k in ckpt},
              "weights": {"file": WEIGHTS_FILE, "sha256": hashlib.sha256(blob).hexdigest(), "bytes": len(blob)},
              "provenance": provenance}
    text = json.dumps(config, indent=1) + "\n"  # before any file: a value JSON cannot hold fails here
    card = model_card(config, made_by)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    with temporary_beside(out / WEIGHTS_FILE) as tmp:
        tmp.write_bytes(blob)
        publish_pair(tmp, out / WEIGHTS_FILE, out / CONFIG_FILE, text.encode())
    with atomic_path(out / CARD_FILE) as tmp:  # after the pair, which is what loads; it names the weights' sha256
        tmp.write_text(card, encoding="utf-8")
    return config


def stale_temporaries(folder: Path) -> list[Path]:
    """The hidden temporaries a killed `write_weights` left in `folder` (`.model.safetensors.*.tmp`,
    `.config.json.*.tmp`, the pending config's `..config.json.pending.*.tmp`, `.README.md.*.tmp`): to remove, under the
    folder's lock, where no other writer is alive."""
    marks = tuple(f".{name}." for name in (WEIGHTS_FILE, CONFIG_FILE, pending_of(CONFIG_FILE).name, CARD_FILE))
    return sorted(p for p in Path(folder).glob(".*.tmp") if p.is_file() and p.name.startswith(marks))


def _recorded_sha(config_bytes: bytes) -> str | None:
    try:
        weights = json.loads(config_bytes).get("weights")
        return weights.get("sha256") if isinstance(weights, dict) else None
    except (ValueError, AttributeError, RecursionError):
        return None


def read_config(weights: Path, content: bytes | None = None) -> bytes:
    """The bytes of the `config.json` beside a `model.safetensors` (whose bytes are `content`): after a
    kill between the pair's two renames, the pending config that matches them (`publish_pair`)."""
    path = weights.parent / CONFIG_FILE
    candidates = [p for p in (path, pending_of(path)) if p.exists()]  # a FIFO there is read_bytes' to name
    if not candidates:
        raise WeightsError(f"refused {printable(weights)}: no {CONFIG_FILE} beside it (the model's config, classes "
                           "and preprocessing); export the pair with mlit-edge export-weights")
    first = read_bytes(candidates[0], CONFIG_FILE, METADATA_BYTES)
    if content is None or len(candidates) == 1:
        return first
    digest = hashlib.sha256(content).hexdigest()
    for candidate in candidates:
        data = first if candidate == candidates[0] else read_bytes(candidate, CONFIG_FILE, METADATA_BYTES)
        if _recorded_sha(data) == digest:
            return data
    return first


def checkpoint_fields(weights: Path, content: bytes, config_bytes: bytes) -> dict:
    """What a checkpoint dict holds, from a weights pair: the fields of `config.json` and the tensors of
    `content`, read with safetensors (never torch.load) once its sha256 matches the one the config records."""
    from safetensors import SafetensorError
    from safetensors.torch import load

    name = printable(weights)
    config = parse_json(config_bytes, weights.parent / CONFIG_FILE, "weights config", hint="export the pair again")
    if not isinstance(config, dict) or config.get("format") != FORMAT:
        raise WeightsError(f"refused {name}: its {CONFIG_FILE} is not an mlit-edge weights config (no "
                           f"'{FORMAT}' marker)")
    if not isinstance(config.get("format_version"), int) or config["format_version"] > FORMAT_VERSION:
        raise WeightsError(f"{name} was written by a newer mlit-edge "
                           f"({printable(config.get('mlit_edge_version'))}); upgrade")
    recorded = (config.get("weights") or {}).get("sha256") if isinstance(config.get("weights"), dict) else None
    if hashlib.sha256(content).hexdigest() != recorded:
        raise WeightsError(f"refused {name}: it does not match the sha256 its {CONFIG_FILE} records (the file "
                           "was changed, damaged or paired with another model's config)")
    disagreement = timm_problem(config)
    if disagreement:
        raise WeightsError(f"refused {name}: in its {CONFIG_FILE}, {disagreement} (edited by hand?); mlit-edge "
                           "reads its own fields, so edit both alike, or export the pair again")
    try:
        tensors = load(content)
    except (SafetensorError, ValueError, RuntimeError) as e:
        raise WeightsError(f"refused {name}: not a readable safetensors file ({printable(first_line(e))})") from None
    fields = {k: config[k] for k in KEPT if k in config}
    return {**fields, "mlit_edge_version": config.get("mlit_edge_version"), "model": tensors,
            "weights_provenance": config.get("provenance")}
