"""What the user reads of a failure: one line of it."""
from __future__ import annotations


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
