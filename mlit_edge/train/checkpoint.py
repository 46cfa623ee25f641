"""Checkpoints: plain dicts, written atomically, read with `weights_only=True`, checked before use."""
from __future__ import annotations

import dataclasses
import hashlib
import io
import math
import os
import random
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from .. import __version__
from ..model.config import MAEConfig, MLiTConfig
from ..base.messages import first_line, not_a_file, printable
from .weights_file import checkpoint_fields, header_problem, is_safetensors
from ..artifacts.sidecar import atomic_path
from .pretrained import is_pretrained, read_pretrained, shipped_config

FORMAT = "mlit-edge-checkpoint"
FORMAT_VERSION = 1
KINDS = ("mlit", "mmlit")


class CheckpointError(ValueError):
    """A checkpoint that cannot be used for what was asked."""


def config_to_dict(cfg: MLiTConfig | MAEConfig) -> dict:
    return dataclasses.asdict(cfg)


def _tuples(d: dict, cls) -> dict:
    """Restore tuple-typed fields (asdict keeps tuples, but be tolerant of lists)."""
    out = {}
    for f in dataclasses.fields(cls):
        if f.name in d:
            v = d[f.name]
            out[f.name] = tuple(v) if isinstance(v, list) else v
    return out


def config_from_dict(kind: str, d: dict) -> MLiTConfig | MAEConfig:
    if kind == "mlit":
        return MLiTConfig(**_tuples(d, MLiTConfig))
    enc = MLiTConfig(**_tuples(d["encoder"], MLiTConfig))
    rest = {k: v for k, v in _tuples(d, MAEConfig).items() if k != "encoder"}
    return MAEConfig(encoder=enc, **rest)


def rng_state() -> dict:
    """Every random stream that training draws from, in a form `weights_only` loading accepts."""
    np_state = np.random.get_state()
    state = {
        "torch": torch.get_rng_state(),
        "numpy": [np_state[0], torch.from_numpy(np_state[1].astype(np.int64)), *np_state[2:]],
        "python": random.getstate(),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict) -> None:
    torch.set_rng_state(state["torch"])
    name, keys, pos, has_gauss, cached = state["numpy"]
    np.random.set_state((name, keys.numpy().astype(np.uint32), pos, has_gauss, cached))
    random.setstate(state["python"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def save_atomic(obj: Any, path: str | Path) -> None:
    """torch.save to a temporary file in the same folder, fsync, then rename over `path`."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(path) as tmp:
        with open(tmp, "wb") as f:
            torch.save(obj, f)
            f.flush()
            os.fsync(f.fileno())


def make_checkpoint(kind: str, model: nn.Module, cfg: MLiTConfig | MAEConfig, size: str | None,
                    data_meta: dict, **extra: Any) -> dict:
    """The checkpoint dict: model weights, config, data and preprocessing, version, plus `extra`
    (optimizer, scaler, scheduler, epoch, rng, args, metrics)."""
    model = getattr(model, "module", model)  # unwrap DDP
    return {"format": FORMAT, "format_version": FORMAT_VERSION, "mlit_edge_version": __version__,
            "kind": kind, "size": size, "config": config_to_dict(cfg), "data": data_meta,
            "model": model.state_dict(), **extra}


def load_checkpoint(path: str | Path, kind: str | None = None, map_location: str | torch.device = "cpu",
                    content: bytes | None = None) -> dict:
    """Read a checkpoint safely; refuse pickles that need code, foreign files and the wrong kind.

    `content`: the file's bytes when the caller already read them (to hash exactly what is loaded).
    `pretrained:NAME` loads a shipped model once its sha256 is checked.
    """
    if content is None:
        path, content = read_bytes(path)
    path = Path(path)
    if is_safetensors(content, path):  # a weights pair (model.safetensors + config.json): no pickle, no torch.load
        ckpt = _from_weights(path, content)
    else:
        bomb = _declared_size_problem(content)
        if bomb:
            raise CheckpointError(f"refused {printable(path)}: {bomb}")
        try:
            ckpt = torch.load(io.BytesIO(content), map_location=map_location, weights_only=True)
        except Exception as e:  # foreign files fail in many ways (UnpicklingError, RuntimeError, KeyError, ...)
            first = first_line(e)
            raise CheckpointError(f"refused {printable(path)}: not a safe mlit-edge checkpoint (weights-only load failed: "
                                  f"{type(e).__name__}: {first[:200]})") from None
    name = printable(path)
    if not isinstance(ckpt, dict) or ckpt.get("format") != FORMAT:
        raise CheckpointError(f"refused {name}: not an mlit-edge checkpoint (no '{FORMAT}' marker)")
    if not isinstance(ckpt.get("format_version"), int) or ckpt["format_version"] > FORMAT_VERSION:
        raise CheckpointError(f"{name} was written by a newer mlit-edge ({ckpt.get('mlit_edge_version')}); upgrade")
    problem = _structure_problem(ckpt)
    if problem:
        raise CheckpointError(f"refused {name}: {problem}; it was not written by mlit-edge train (or was edited)")
    if kind is not None and ckpt.get("kind") != kind:
        want = {"mlit": "a supervised mLiT", "mmlit": "an mmLiT pre-training"}[kind]
        raise CheckpointError(f"{name} holds a {describe_checkpoint(ckpt)}, but {want} checkpoint is needed")
    try:
        config_from_dict(ckpt["kind"], ckpt["config"])
    except (TypeError, ValueError, KeyError) as e:
        msg = str(e.args[0] if isinstance(e, KeyError) else e)
        raise CheckpointError(f"refused {name}: its config is invalid ({msg})") from None
    return ckpt


def _from_weights(path: Path, content: bytes) -> dict:
    """The checkpoint dict of a `model.safetensors` and the `config.json` beside it (a shipped model's config
    checked against the sha256 its index records, as its weights were), for the checks every checkpoint gets."""
    problem = header_problem(content)  # before its config is looked for: the file itself is what is wrong
    if problem:
        raise CheckpointError(f"refused {printable(path)}: not a readable safetensors file ({problem})")
    fields = checkpoint_fields(path, content, shipped_config(path, content))
    return {"format": FORMAT, "format_version": FORMAT_VERSION, **fields}


def _declared_size_problem(content: bytes) -> str | None:
    """Why a zip checkpoint's declared sizes are not to be trusted, read from its central directory before
    any record is inflated (None when they are). torch.save stores every record uncompressed, so a file that
    declares more than it holds was made by something else: a zip bomb, for one."""
    if not content.startswith(b"PK"):
        return None  # not a zip: torch.load's own reader refuses it
    try:
        records = zipfile.ZipFile(io.BytesIO(content)).infolist()
    except (zipfile.BadZipFile, OSError, ValueError, EOFError) as e:
        return f"not a readable zip archive ({first_line(e, 120)})"
    declared = sum(r.file_size for r in records)
    if declared > len(content) + (1 << 20) or any(r.compress_type != zipfile.ZIP_STORED for r in records):
        return (f"its records declare {declared / 2**20:.1f} MiB in a {len(content) / 2**20:.1f} MiB file, "
                "compressed; mlit-edge checkpoints store their records uncompressed (a zip bomb?)")
    return None


def _structure_problem(ckpt: dict) -> str | None:
    """What is missing or mistyped in a checkpoint dict (None when it has what loaders use)."""
    if ckpt.get("kind") not in KINDS:
        return f"kind is {ckpt.get('kind')!r}, not one of {KINDS}"
    for key in ("config", "model", "data"):
        if not isinstance(ckpt.get(key), dict):
            return f"'{key}' is missing or not a dict"
    if not all(isinstance(v, torch.Tensor) for v in ckpt["model"].values()):
        return "'model' holds something other than tensors"
    for name, t in ckpt["model"].items():  # named with repr: a key may hold escape codes
        if not t.is_floating_point():
            return f"tensor {str(name)!r} is {str(t.dtype).removeprefix('torch.')}, not floating point"
        if not torch.isfinite(t).all():
            return f"tensor {str(name)!r} holds NaN or infinity"
    data = ckpt["data"]
    if not isinstance(data.get("name"), str):
        return "data.name (the dataset) is missing"
    if not isinstance(data.get("classes"), list) or not data["classes"]:
        return "data.classes is missing or empty"
    for key in ("mean", "std"):
        v = data.get(key)
        if not (isinstance(v, list) and len(v) == 3 and all(isinstance(x, (int, float)) and math.isfinite(x)
                                                             for x in v)):
            return f"data.{key} is {v!r}, not 3 numbers"
        if key == "std" and min(v) <= 0:
            return f"data.std is {v!r}: a deviation of 0 or less would divide the pixels by it"
    return None


def read_checkpoint(path: str | Path, kind: str | None = None) -> tuple[dict, str]:
    """The checkpoint and the sha256 of the bytes it was loaded from, from one read of the file (or of
    a shipped `pretrained:NAME`, checked against its recorded sha256)."""
    file, content = read_bytes(path)
    return load_checkpoint(file, kind, content=content), hashlib.sha256(content).hexdigest()


def read_bytes(path: str | Path) -> tuple[Path, bytes]:
    """The file a checkpoint spec names and its bytes: a path, or `pretrained:NAME` once its sha256 matches."""
    if is_pretrained(path):
        return read_pretrained(path)
    file = Path(path)
    kind = not_a_file(file)  # a FIFO or a device would block the read or never end
    if kind:
        raise CheckpointError(f"checkpoint {printable(file)} {kind}")
    return file, file.read_bytes()


def describe_checkpoint(ckpt: dict) -> str:
    """e.g. 'mlit-xxs trained on mnist5k (10 classes)'."""
    size = ckpt.get("size") or "custom"
    data = ckpt.get("data", {})
    # kind, size and dataset name are the file's own words (a config.json's `size` may hold escape codes)
    return printable(f"{ckpt.get('kind')}-{size} model trained on {data.get('name', '?')} "
                     f"({len(data.get('classes', []))} classes)")


def _names(keys: list, shown: int = 3) -> str:
    """A few tensor names, each quoted with repr (a key may hold escape codes), and how many more."""
    names = ", ".join(printable(repr(str(k))) for k in keys[:shown])
    return names + (f" and {len(keys) - shown} more" if len(keys) > shown else "")


def fit_problem(ckpt: dict, model: nn.Module) -> str | None:
    """Why the tensors of a checkpoint that `load_checkpoint` accepted do not fit the model its config builds
    (None when they do)."""
    want = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    have = {k: tuple(v.shape) for k, v in ckpt["model"].items()}
    missing, extra = [k for k in want if k not in have], sorted(str(k) for k in have if k not in want)
    shapes = [k for k in want if k in have and want[k] != have[k]]
    parts = ([f"{len(missing)} missing ({_names(missing)})"] if missing else []) + \
            ([f"{len(extra)} that its config has no place for ({_names(extra)})"] if extra else []) + \
            [f"{printable(repr(k))} is {'x'.join(map(str, have[k])) or 'a scalar'} where its config makes "
             f"{'x'.join(map(str, want[k])) or 'a scalar'}" for k in shapes[:3]]
    return "its tensors do not fit its config: " + "; ".join(parts) if parts else None


def model_from_checkpoint(ckpt: dict, source: str | Path | None = None) -> nn.Module:
    """Rebuild the model a checkpoint describes and load its weights strictly; a CheckpointError in one line
    (naming `source`, the checkpoint's path, when given) where they do not fit (`fit_problem`)."""
    from ..model.mae import MMLiT
    from ..model.mlit import MLiT

    cfg = config_from_dict(ckpt["kind"], ckpt["config"])
    model = MLiT(cfg) if ckpt["kind"] == "mlit" else MMLiT(cfg)
    problem = fit_problem(ckpt, model)
    if problem:
        raise CheckpointError(f"refused {printable(source) if source is not None else 'the checkpoint'}: {problem}")
    try:
        model.load_state_dict(ckpt["model"])
    except RuntimeError as e:
        raise CheckpointError(f"checkpoint weights do not match its own config: {first_line(e)}") from None
    return model


def checked_model(ckpt: dict, source: str | Path) -> nn.Module:
    """`model_from_checkpoint` once the classes fit the head too: what eval runs and export-weights publishes,
    so that both refuse a checkpoint in the same words (a classifier whose head has another number of
    outputs than data.classes names would label its predictions wrongly)."""
    classes, outputs = len(ckpt["data"]["classes"]), ckpt["config"].get("num_classes")
    if ckpt["kind"] == "mlit" and outputs != classes:
        raise CheckpointError(f"refused {printable(source)}: its config's head has {printable(outputs)} outputs "
                              f"(num_classes) but data.classes names {classes} classes")
    return model_from_checkpoint(ckpt, source)
