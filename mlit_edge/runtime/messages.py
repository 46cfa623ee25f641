"""What the user reads: one line of a failure, and the stages' progress lines on stderr."""
from __future__ import annotations

import logging
import sys


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
