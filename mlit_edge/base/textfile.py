"""Bounded reads of the JSON and text files the package reads: sidecars, weights configs and indexes,
calibration recipes, metrics logs, key files and labels, and what the system says about itself.

A file is looked at before it is read (stat: a FIFO would block the open, /dev/zero never ends), its size
is checked against the limit of its kind, and then at most `limit + 1` bytes are read, so a file that
grows between the stat and the read is refused too. Read whole, a 2 GiB sparse `config.json` cost 3.3 GB
of RSS, or a MemoryError traceback (issue 47); refused here it costs one line.
"""
from __future__ import annotations

import json
import os
import stat
from typing import Any, Union

from .messages import file_kind, printable, require_file

# [ours] a sidecar, a weights config, an index or a recipe is a few KB: the largest class list there is
# (ImageNet-21k's 21,843 names) is about 0.5 MB, and a JSON parse costs several times the file in memory
METADATA_BYTES = 4 << 20
# [ours] a metrics log holds a line of about 300 bytes an epoch: 64 MiB is some 200,000 epochs
LOG_BYTES = 64 << 20

PathLike = Union[str, "os.PathLike[str]"]


def _size(n: int) -> str:
    return f"{n} bytes ({n / 2**20:.1f} MiB)" if n >= 1 << 20 else f"{n} bytes"


def too_large(path: PathLike, what: str, size: int, limit: int) -> ValueError:
    """The one-line refusal of a file over its limit, naming it, its size and the limit."""
    return ValueError(f"refused {what} {printable(os.fspath(path))}: it holds {_size(size)}, over the limit of "
                      f"{_size(limit)} for a {what}")


def read_bytes(path: PathLike, what: str, limit: int = METADATA_BYTES) -> bytes:
    """The bytes of the regular file `path` when it holds at most `limit` of them; else a one-line error
    (ValueError over the limit, an OSError naming what it is for a folder, FIFO or device). `what` names
    the file's role in the message, e.g. "sidecar" or "config.json"."""
    require_file(path, f"{what} ")
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0)  # replaced by a FIFO since the stat: the open returns
    fd = os.open(path, flags)
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode):
            raise OSError(f"{what} {printable(os.fspath(path))} {file_kind(st.st_mode)}")
        if st.st_size > limit:
            raise too_large(path, what, st.st_size, limit)
        data = f.read(limit + 1)  # st_size is 0 for /proc files, and a file may grow after the fstat
        if len(data) > limit:
            raise too_large(path, what, max(len(data), os.fstat(f.fileno()).st_size), limit)
    return data


def read_text(path: PathLike, what: str, limit: int = METADATA_BYTES, errors: str = "strict") -> str:
    """`read_bytes` decoded as UTF-8 (a UnicodeDecodeError, a ValueError, where it is not and `errors` is
    "strict", for callers that say what a non-UTF-8 file means to them)."""
    return read_bytes(path, what, limit).decode("utf-8", errors)


def parse_json(data: bytes | str, path: PathLike, what: str, hint: str = "") -> Any:
    """The JSON value of `data`, read from `path`; else a ValueError in one line naming the file (and
    ending with `hint`, what to do about it, when given)."""
    where = f"{what} {printable(os.fspath(path))}"
    end = f"; {hint}" if hint else ""
    try:
        return json.loads(data)
    except RecursionError:  # arrays nested thousands deep
        raise ValueError(f"{where} is nested too deeply to be JSON mlit-edge wrote{end}") from None
    except UnicodeDecodeError as e:
        raise ValueError(f"{where} is not valid JSON (not UTF-8 at byte {e.start}){end}") from None
    except ValueError as e:  # JSONDecodeError, and an integer of more digits than Python converts
        raise ValueError(f"{where} is not valid JSON ({printable(getattr(e, 'msg', e))}){end}") from None


def read_json(path: PathLike, what: str, limit: int = METADATA_BYTES, hint: str = "") -> Any:
    """The JSON value of the file `path`, read bounded (`read_bytes`) and parsed (`parse_json`)."""
    return parse_json(read_bytes(path, what, limit), path, what, hint)


__all__ = ["METADATA_BYTES", "LOG_BYTES", "too_large", "read_bytes", "read_text", "parse_json", "read_json"]
