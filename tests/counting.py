"""Counts how often a real command hashes, reads and parses each file and decodes each split.

`count_work()` wraps the functions that do that work wherever the package (or a library it calls)
holds a reference to them, runs the block, and restores them. What it counts:

- hashed: `artifacts.sidecar.sha256_file(path)`, and `read_sidecar`'s hash of the bytes it was handed;
- sidecar read: `artifacts.sidecar.read_sidecar(path)` (verified or not), by the artifact's path;
- parsed: the onnx package's deserialisation of a file (`onnx.load`, `load_model`, `load_from_string`),
  from the package or a library (ONNX Runtime's quantizer), by path, or by the bytes' hash when the
  bytes were read first; shape inference's own round trip (it hands back a new model as bytes) is
  its output, not the file, and is not counted;
- decoded: `train.data.load_dataset(name, split)`, by (name, split).

The counting lives here, not in the package: the package does not know it is counted.
"""
from __future__ import annotations

import contextlib
import hashlib
import re
import sys
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator


@dataclass
class Work:
    hashed: Counter = field(default_factory=Counter)
    sidecar: Counter = field(default_factory=Counter)
    parsed: Counter = field(default_factory=Counter)
    decoded: Counter = field(default_factory=Counter)
    digests: dict = field(default_factory=dict)  # sha256 -> file name, to name bytes by the file they came from

    def of(self, path: str | Path) -> dict:
        """The counts that concern one file."""
        name = Path(path).name
        return {"hashed": self.hashed[name], "sidecar read": self.sidecar[name], "parsed": self.parsed[name]}


def _final(path) -> str:
    """The name a file is published under: `.NAME.abc123.tmp` (`artifacts.sidecar.temporary_beside`) -> NAME."""
    name = Path(path).name
    found = re.fullmatch(r"\.(.+)\.[^.]+\.tmp", name)
    return found.group(1) if found else name


def _patch_everywhere(original: Callable, wrapper: Callable, patched: list) -> None:
    """Point every module attribute that is `original` at `wrapper` (modules import functions by name)."""
    for module in list(sys.modules.values()):
        if module is None:
            continue
        try:
            attrs = vars(module)
        except TypeError:
            continue
        for name, value in list(attrs.items()):
            if value is original:
                patched.append((module, name, original))
                setattr(module, name, wrapper)


@contextlib.contextmanager
def count_work() -> Iterator[Work]:
    import onnx
    import onnx.serialization  # noqa: F401  (the loaders live there in onnx >= 1.15)

    import mlit_edge.export.pipeline  # noqa: F401  (import the stages, so that their references get patched)
    import mlit_edge.engine.build  # noqa: F401
    import mlit_edge.train.data as data
    import mlit_edge.artifacts.sidecar as sidecar

    work = Work()
    patched: list = []
    sha256_file, read_sidecar, load_dataset = sidecar.sha256_file, sidecar.read_sidecar, data.load_dataset

    def counted_sha256(path, *a, **k):
        digest = sha256_file(path, *a, **k)
        work.hashed[_final(path)] += 1
        work.digests[digest] = _final(path)
        return digest

    def counted_read_sidecar(artifact, verify_hash=True, content=None):
        work.sidecar[Path(artifact).name] += 1
        if verify_hash and content is not None:
            work.hashed[Path(artifact).name] += 1
        return read_sidecar(artifact, verify_hash, content)

    def counted_load_dataset(name, split="train", *a, **k):
        work.decoded[(str(name), split)] += 1
        return load_dataset(name, split, *a, **k)

    def counted_loader(original):
        def load(f, *a, **k):
            if sys._getframe(1).f_globals.get("__name__") == "onnx.shape_inference":
                return original(f, *a, **k)  # the inferred model coming back from C++: an output, not the file
            if isinstance(f, (bytes, bytearray)):
                key = work.digests.get(hashlib.sha256(f).hexdigest(), "<bytes>")
            else:
                key = _final(getattr(f, "name", f))
            work.parsed[key] += 1
            return original(f, *a, **k)
        return load

    try:
        _patch_everywhere(sha256_file, counted_sha256, patched)
        _patch_everywhere(read_sidecar, counted_read_sidecar, patched)
        _patch_everywhere(load_dataset, counted_load_dataset, patched)
        loaders = {id(fn): fn for fn in (onnx.load, onnx.load_model, onnx.load_from_string, onnx.load_model_from_string)}
        for fn in loaders.values():
            _patch_everywhere(fn, counted_loader(fn), patched)
        yield work
    finally:
        for module, name, original in reversed(patched):
            setattr(module, name, original)
