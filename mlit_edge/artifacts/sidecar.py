"""Provenance: the `X.json` sidecar next to every `.onnx` and `.plan`, and atomic artifact writes.

The artifact itself stays raw (trtexec and DeepStream load it as is); the sidecar records what it
is, what it was made from and with what. Loaders read and check it before touching the artifact.

An artifact and its sidecar are replaced as a pair (`publish`): the new sidecar is first written
under a hidden pending name, then the artifact is renamed into place, then the sidecar. A kill at
any instant leaves the old pair, or the new artifact beside a pending sidecar that matches it, which
`read_sidecar` accepts and `recover_publishes` completes: never a mix. A weights pair (`model.safetensors`
and the `config.json` that records its sha256, train/weights_file.py) is published the same way
(`publish_pair`), and recovered by the same function.
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any, Iterator, Mapping

from .. import __version__
from ..base.compat import removesuffix
from ..base.messages import printable
from ..base.textfile import read_json


class SidecarError(ValueError):
    """A sidecar field the runtime cannot use: the message names the field (`schema` checks them)."""

FORMAT = "mlit-edge-artifact"
WEIGHTS_FORMAT = "mlit-edge-weights"  # the config.json of a weights pair (train/weights_file.py)
AUTO_FIELDS = ("format", "mlit_edge_version", "artifact", "sha256", "bytes")


def sha256_file(path: str | Path, chunk: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


def sidecar_path(artifact: str | Path) -> Path:
    """model.onnx -> model.onnx.json"""
    return Path(f"{artifact}.json")


def pending_of(companion: str | Path) -> Path:
    """model.onnx.json -> .model.onnx.json.pending (config.json -> .config.json.pending): the next
    companion file of an artifact, while the pair is being replaced."""
    companion = Path(companion)
    return companion.with_name(f".{companion.name}.pending")


def pending_path(artifact: str | Path) -> Path:
    """model.onnx -> .model.onnx.json.pending: the next sidecar, while its pair is being replaced."""
    return pending_of(sidecar_path(artifact))


@contextlib.contextmanager
def temporary_beside(path: str | Path) -> Iterator[Path]:
    """A hidden temporary file beside `path`, removed when the block ends unless it was moved away.

    A failure or a kill leaves no partial file under the final name (after a SIGKILL only a dot-file
    remains, which no loader picks up and the next build removes).
    """
    path = Path(path)
    parent = path.parent
    if not parent.exists():
        raise FileNotFoundError(f"output folder {parent} does not exist")
    if not os.access(parent, os.W_OK):
        raise PermissionError(f"cannot write to {parent}")
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=parent)
    os.close(fd)
    os.chmod(tmp, 0o666 & ~current_umask())  # mkstemp makes 0600; give the file the usual permissions
    try:
        yield Path(tmp)
    finally:
        Path(tmp).unlink(missing_ok=True)


@contextlib.contextmanager
def atomic_path(path: str | Path) -> Iterator[Path]:
    """Yield a temporary path beside `path`; rename it over `path` only if the block succeeds."""
    with temporary_beside(path) as tmp:
        yield tmp
        _fsync(tmp)
        os.replace(tmp, path)


def _fsync(path: Path) -> None:
    with open(path, "rb") as f:
        os.fsync(f.fileno())


def current_umask() -> int:
    """The process's umask (POSIX has no read-only call: set it and put it back), for files and folders that
    are made private and then given the usual permissions when published."""
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _record(artifact_name: str, content_path: Path, info: dict) -> dict:
    return {"format": FORMAT, "mlit_edge_version": __version__, "artifact": artifact_name,
            "sha256": sha256_file(content_path), "bytes": content_path.stat().st_size, **user_fields(info)}


def _write_bytes(path: Path, data: bytes) -> None:
    with atomic_path(path) as tmp:
        tmp.write_bytes(data)


def _write_json(path: Path, data: dict) -> None:
    _write_bytes(path, (json.dumps(data, indent=2, sort_keys=False) + "\n").encode())


def publish_pair(tmp: str | Path, artifact: str | Path, companion: str | Path, text: bytes) -> None:
    """Move the finished file at `tmp` to `artifact` and write `text` as `companion`, the file that records
    its sha256, as a pair: the companion first under its pending name, then the artifact renamed into
    place, then the companion. Readers take a pending companion that matches the artifact."""
    tmp, artifact, companion = Path(tmp), Path(artifact), Path(companion)
    _fsync(tmp)
    _write_bytes(pending_of(companion), text)
    os.replace(tmp, artifact)
    os.replace(pending_of(companion), companion)


def publish(tmp: str | Path, artifact: str | Path, info: dict) -> dict:
    """Move the finished artifact at `tmp` to `artifact` together with its sidecar (`info` plus the
    artifact's sha256, size and the mlit-edge version); returns the record as written."""
    tmp, artifact = Path(tmp), Path(artifact)
    record = _record(artifact.name, tmp, info)
    publish_pair(tmp, artifact, sidecar_path(artifact),
                 (json.dumps(record, indent=2, sort_keys=False) + "\n").encode())
    return record


def write_sidecar(artifact: str | Path, info: dict) -> dict:
    """(Re)write the sidecar of an artifact already in place; returns the record as written."""
    artifact = Path(artifact)
    record = _record(artifact.name, artifact, info)
    _write_json(sidecar_path(artifact), record)
    return record


def user_fields(info: Mapping[str, Any]) -> dict:
    """A sidecar's JSON without the fields `publish` fills in itself (to derive a new record)."""
    return {k: v for k, v in info.items() if k not in AUTO_FIELDS}


def _load_json(path: Path) -> dict:
    data = read_json(path, "sidecar", hint="rebuild the artifact")
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise ValueError(f"{printable(path)} is not an mlit-edge sidecar")
    return data


def read_sidecar(artifact: str | Path, verify_hash: bool = True, content: bytes | None = None) -> dict:
    """The sidecar of `artifact`, checked to belong to it (sha256) unless `verify_hash` is off.

    With `content` (the artifact's bytes as the caller will use them) those bytes are hashed instead
    of the file, so what was checked is exactly what gets loaded. After a kill in the middle of
    `publish`, the pending sidecar that matches the new artifact is the one returned.
    """
    artifact = Path(artifact)
    path, pending = sidecar_path(artifact), pending_path(artifact)
    if not path.is_file() and not pending.is_file():
        raise FileNotFoundError(f"{artifact} has no sidecar {path.name}; rebuild it with mlit-edge")
    if not verify_hash:
        return _load_json(path if path.is_file() else pending)
    digest = hashlib.sha256(content).hexdigest() if content is not None else sha256_file(artifact)
    for candidate in (path, pending):
        if candidate.is_file():
            data = _load_json(candidate)
            if data.get("sha256") == digest:
                return data
    raise ValueError(f"{artifact} does not match its sidecar (sha256 differs): the file was changed or replaced; "
                     "rebuild it with mlit-edge")


def recorded_artifact(companion: Path, data: object) -> tuple[Path | None, str | None]:
    """The artifact a companion file (a sidecar, or a weights pair's config.json) belongs to, and the
    sha256 it records of it; (None, None) when it is neither."""
    if not isinstance(data, dict):
        return None, None
    if data.get("format") == FORMAT:
        return companion.with_name(removesuffix(companion.name, ".json")), data.get("sha256")
    weights = data.get("weights")
    if data.get("format") == WEIGHTS_FORMAT and isinstance(weights, dict) and isinstance(weights.get("file"), str):
        name = weights["file"]
        if name and "/" not in name and name not in (".", ".."):  # beside its config, never elsewhere
            return companion.with_name(name), weights.get("sha256")
    return None, None


def recover_publishes(folder: str | Path) -> list[str]:
    """Finish or undo every `publish` or `publish_pair` a kill interrupted in `folder`: a pending companion
    that matches its artifact is renamed into place, one that does not is removed. Returns what was done."""
    done = []
    for pending in sorted(Path(folder).glob(".*.json.pending")):
        companion = pending.with_name(removesuffix(pending.name[1:], ".pending"))
        try:
            artifact, recorded = recorded_artifact(companion, read_json(pending, "pending sidecar"))
            matches = artifact is not None and artifact.is_file() and recorded == sha256_file(artifact)
        except (OSError, ValueError):
            matches = False
        if matches:
            os.replace(pending, companion)
            done.append(f"completed {companion.name}")
        else:
            pending.unlink(missing_ok=True)
            done.append(f"dropped an unfinished {companion.name}")
    return done
