"""Provenance: the `X.json` sidecar next to every `.onnx` and `.plan`, and atomic artifact writes.

The artifact itself stays raw (trtexec and DeepStream load it as is); the sidecar records what it
is, what it was made from and with what. Loaders read and check it before touching the artifact.
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import os
import tempfile
from pathlib import Path
from typing import Iterator

from . import __version__

FORMAT = "mlit-edge-artifact"


def sha256_file(path: str | Path, chunk: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


def sidecar_path(artifact: str | Path) -> Path:
    """model.onnx -> model.onnx.json"""
    return Path(f"{artifact}.json")


@contextlib.contextmanager
def atomic_path(path: str | Path) -> Iterator[Path]:
    """Yield a temporary path beside `path`; rename it over `path` only if the block succeeds.

    A failure or a kill leaves no partial file under the final name (the hidden temporary is removed
    on errors; after a SIGKILL only a dot-file remains, which no loader picks up).
    """
    path = Path(path)
    parent = path.parent
    if not parent.exists():
        raise FileNotFoundError(f"output folder {parent} does not exist")
    if not os.access(parent, os.W_OK):
        raise PermissionError(f"cannot write to {parent}")
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=parent)
    os.close(fd)
    try:
        yield Path(tmp)
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes 0600; give the file the usual permissions
        os.replace(tmp, path)
    finally:
        Path(tmp).unlink(missing_ok=True)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def write_sidecar(artifact: str | Path, info: dict) -> dict:
    """Write `artifact`.json with the artifact's sha256, size and the mlit-edge version added; returns
    the record as written (what `read_sidecar` would give back)."""
    artifact = Path(artifact)
    record = {"format": FORMAT, "mlit_edge_version": __version__, "artifact": artifact.name,
              "sha256": sha256_file(artifact), "bytes": artifact.stat().st_size, **info}
    path = sidecar_path(artifact)
    with atomic_path(path) as tmp:
        tmp.write_text(json.dumps(record, indent=2, sort_keys=False) + "\n")
    return record


AUTO_FIELDS = ("format", "mlit_edge_version", "artifact", "sha256", "bytes")


def user_fields(record: dict) -> dict:
    """A sidecar record without the fields `write_sidecar` fills in itself (to derive a new record)."""
    return {k: v for k, v in record.items() if k not in AUTO_FIELDS}


def read_sidecar(artifact: str | Path, verify_hash: bool = True, content: bytes | None = None) -> dict:
    """The sidecar of `artifact`, checked to belong to it (sha256) unless `verify_hash` is off.

    With `content` (the artifact's bytes as the caller will use them) those bytes are hashed instead
    of the file, so what was checked is exactly what gets loaded.
    """
    artifact = Path(artifact)
    path = sidecar_path(artifact)
    if not path.is_file():
        raise FileNotFoundError(f"{artifact} has no sidecar {path.name}; rebuild it with mlit-edge")
    try:
        record = json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise ValueError(f"sidecar {path} is not valid JSON ({e.msg}); rebuild the artifact") from None
    if not isinstance(record, dict) or record.get("format") != FORMAT:
        raise ValueError(f"{path} is not an mlit-edge sidecar")
    if verify_hash:
        digest = hashlib.sha256(content).hexdigest() if content is not None else sha256_file(artifact)
        if record.get("sha256") != digest:
            raise ValueError(f"{artifact} does not match its sidecar (sha256 differs): the file was changed or "
                             "replaced; rebuild it with mlit-edge")
    return record
