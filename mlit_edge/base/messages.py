"""What the user reads: one line of a failure, and the stages' progress lines on stderr."""
from __future__ import annotations

import functools
import logging
import os
import stat
import sys
from pathlib import Path
from typing import Callable


def printable(text: object) -> str:
    """`text` safe for a terminal: control characters (escape codes that set the title or clear the
    screen, a newline that would forge a line of output) and unpaired surrogates written as escapes."""
    text = str(text)
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def first_line(exc: BaseException, limit: int | None = None) -> str:
    """The first non-empty line of `exc`'s message (cut to `limit` characters), or its type's name when the
    message is empty: `MemoryError()` and friends have none, and a one-line error must still say something."""
    message = exc.args[0] if isinstance(exc, KeyError) and exc.args else exc
    for line in str(message).splitlines():
        if line.strip():
            return line.strip()[:limit] if limit else line.strip()
    return type(exc).__name__


def typed_line(exc: BaseException, limit: int | None = None) -> str:
    """`Type: first line` of `exc`, or just `Type` when its message is empty (for unexpected errors, where
    the type is half the story)."""
    line = first_line(exc, limit)
    return type(exc).__name__ if line == type(exc).__name__ else f"{type(exc).__name__}: {line}"


def not_a_file(path: str | os.PathLike) -> str | None:
    """None when `path` is a regular file (through links); else what it is, in words that finish "PATH ...":
    "does not exist", or "is not a regular file (it is a folder)" (a device, a FIFO). Only stat(2) is called:
    opening a FIFO or a terminal to find out would block, and reading /dev/zero would never end."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return "is a link to nothing" if os.path.islink(path) else "does not exist"
    except NotADirectoryError:
        return "does not exist (a folder on its way is a file)"
    except (OSError, ValueError) as e:  # ValueError: a NUL character, which no path holds
        return f"cannot be looked at ({getattr(e, 'strerror', None) or first_line(e)})"
    return file_kind(mode)


def file_kind(mode: int) -> str | None:
    """None for a regular file's `st_mode`; else what it is, as `not_a_file` says it (for an open descriptor's
    fstat, where a path's stat could name another file)."""
    if stat.S_ISREG(mode):
        return None
    if stat.S_ISDIR(mode):
        return "is not a regular file (it is a folder)"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "is not a regular file (it is a device)"
    if stat.S_ISFIFO(mode):
        return "is not a regular file (it is a FIFO, a named pipe)"
    return "is not a regular file (it is a socket)" if stat.S_ISSOCK(mode) else "is not a regular file"


def require_file(path: str | os.PathLike, what: str = "") -> Path:
    """`path` as a Path when it is a regular file, else an OSError in one line: `what` (e.g. "--onnx "), the
    path (escaped) and what it is instead (`not_a_file`). FileNotFoundError where nothing is there,
    IsADirectoryError for a folder, OSError for a device, FIFO or socket."""
    kind = not_a_file(path)
    if kind is None:
        return Path(path)
    error = (FileNotFoundError if kind.startswith(("does not", "is a link")) else
             IsADirectoryError if kind.endswith("a folder)") else OSError)
    raise error(f"{what}{printable(os.fspath(path))} {kind}")


def escaped(fn: Callable) -> Callable:
    """`fn` whose errors reach the caller with control characters escaped (`printable`): the Python API's
    errors quote sidecars, configs and checkpoints as the CLI's do, and the CLI's `user_errors` is not there to
    escape them. The exception keeps its type and traceback; only its message's strings are rewritten."""
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except Exception as e:
            escape_args(e)
            raise
    return wrapper


def escape_args(e: BaseException) -> None:
    """Rewrite `e`'s message strings with their control characters escaped (`printable`), in place: `escaped`
    does it for a call, `runtime.inputs.escaping` for a generator's results."""
    if e.args and any(isinstance(a, str) and not a.isprintable() for a in e.args):
        e.args = tuple(printable(a) if isinstance(a, str) else a for a in e.args)


def log_lines(log: logging.Logger, text: str) -> None:
    """A report of several lines that our code composed, logged a record per line: the formatter escapes a
    newline inside one record (it could come from a file name), which would print the report on one line."""
    for line in text.splitlines():
        log.info(line)


class _Printable(logging.Formatter):
    """One log record, one line, with control characters escaped: a line may quote a file name or a URL the
    user (or whoever named the file) chose, and an escape code in it would reach the terminal."""

    def format(self, record: logging.LogRecord) -> str:
        return printable(super().format(record))


class _Stderr(logging.StreamHandler):
    """A handler that writes to whatever `sys.stderr` is when a line is logged (a test runner may swap it)."""

    @property
    def stream(self):  # type: ignore[override]
        return sys.stderr

    @stream.setter
    def stream(self, value) -> None:
        pass


def log_to_stderr() -> None:
    """Show the stages' progress lines (the `mlit_edge` loggers, INFO and up) on stderr as they are written,
    one line each with no prefix: what the CLI and bench's child processes print. They stop there: a
    library that configures the root logger (some of ONNX Runtime's tools call `basicConfig`) would
    print each line again. Idempotent."""
    root = logging.getLogger("mlit_edge")
    if not any(isinstance(h, _Stderr) for h in root.handlers):
        handler = _Stderr()
        handler.setFormatter(_Printable("%(message)s"))
        root.addHandler(handler)
    root.setLevel(logging.INFO)
    root.propagate = False
