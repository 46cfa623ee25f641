"""What the device side needs from Python 3.9+, for JetPack 5's Python 3.8 (`tests/test_py38.py` checks
every module a device imports): `str.removesuffix` and `PurePath.is_relative_to`, written out."""
from __future__ import annotations

from pathlib import PurePath


def removesuffix(text: str, suffix: str) -> str:
    """`text.removesuffix(suffix)` (Python 3.9+): `text` without `suffix` at its end, else `text` unchanged."""
    return text[:-len(suffix)] if suffix and text.endswith(suffix) else text


def is_relative_to(path: PurePath, other: PurePath) -> bool:
    """`path.is_relative_to(other)` (Python 3.9+): whether `other` is `path` or one of its parents."""
    try:
        path.relative_to(other)
    except ValueError:
        return False
    return True
