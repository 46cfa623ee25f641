"""Progress of the long steps (an export's verification and calibration, an engine build): a bar on a
terminal, a line every few seconds elsewhere (a log file, CI), always on stderr, since stdout carries the
artifact paths that scripts read.

A step reports only inside `shown(True)`: `mlit-edge export` and `build` (and the Python API's
`Model.export`/`build`) open it from their request's `progress`; a step called outside one (a test, a script
running one function) shows nothing. A context, not an argument: progress is presentation, and threading a
flag through every step that computes would change a dozen signatures for no number they compute.

A terminal gets tqdm's bar, cleared when the step ends; elsewhere a line every `INTERVAL` seconds, since a bar
redrawn into a file is a line per redraw. Either way a step that lasted `INTERVAL` or more ends with one line
saying how long it took, so a log shows where the time went. Without tqdm (a device's Python 3.8) the lines."""
from __future__ import annotations

import contextlib
import contextvars
import sys
import threading
import time
from typing import Any, Iterator, Optional

INTERVAL = 5.0  # seconds between lines off a terminal; the least a step lasts to get its closing line
REFRESH = 1.0  # seconds between redraws of a terminal's bar, so its elapsed time moves while a batch runs
INDENT = "      "  # under the stage's own line ("[export 2/3] ..."), as its other detail lines

_SHOWN: "contextvars.ContextVar[bool]" = contextvars.ContextVar("mlit_edge_progress", default=False)


@contextlib.contextmanager
def shown(enabled: bool) -> Iterator[None]:
    """Steps inside this block report their progress when `enabled`."""
    token = _SHOWN.set(bool(enabled))
    try:
        yield
    finally:
        _SHOWN.reset(token)


class Step:
    """One step's report: `advance` counts the images done."""

    def __init__(self, stream: Any, desc: str, total: Optional[int], bar: Any = None) -> None:
        self.stream, self.desc, self.total, self.bar = stream, desc, total, bar
        self.n, self.start = 0, time.monotonic()

    def advance(self, n: int = 1) -> None:
        self.n += n
        if self.bar is not None:
            self.bar.update(n)

    def elapsed(self) -> float:
        return time.monotonic() - self.start

    def status(self) -> str:
        count = f"{self.n}/{self.total} images, " if self.total else ""
        return f"{INDENT}{self.desc}: {count}{self.elapsed():.0f} s"

    def tick(self) -> None:
        """What the step's timer thread does every `REFRESH` (a bar) or `INTERVAL` (lines) seconds."""
        if self.bar is not None:
            self.bar.refresh()
        else:
            self.write(self.status())

    def finish(self, ok: bool) -> None:
        if self.bar is not None:
            self.bar.close()  # leave=False: the bar goes, the closing line below stays
        took = self.elapsed()
        if ok and took >= INTERVAL:
            what = f"{self.total} images in" if self.total else "done in"
            self.write(f"{INDENT}{self.desc}: {what} {took:.0f} s")

    def write(self, line: str) -> None:
        try:
            self.stream.write(line + "\n")
            self.stream.flush()
        except (OSError, ValueError):  # a closed or broken stderr: progress is not worth failing the work for
            pass


class _Silent(Step):
    def __init__(self) -> None:
        super().__init__(None, "", None)

    def advance(self, n: int = 1) -> None:
        pass


def _bar(stream: Any, desc: str, total: Optional[int]) -> Any:
    """tqdm's bar on `stream` when it is a terminal and tqdm is installed, else None (lines)."""
    try:
        if not stream.isatty():
            return None
        from tqdm import tqdm
    except (AttributeError, ValueError, ImportError):  # no isatty, a closed stream, no tqdm (a device)
        return None
    return tqdm(total=total, desc=INDENT + desc, unit="img", file=stream, leave=False, dynamic_ncols=True,
                bar_format=None if total else "{desc}: {elapsed}")


@contextlib.contextmanager
def progress(desc: str, total: Optional[int] = None) -> Iterator[Step]:
    """Report step `desc` while the block runs, when shown (`shown`): of `total` images (`Step.advance`), or
    with no count (None: the time it has run). A failed step leaves no closing line, so the error is last."""
    if not _SHOWN.get():
        yield _Silent()
        return
    stream = sys.stderr  # the one this command started with (a test runner may swap it later)
    step = Step(stream, desc, total, _bar(stream, desc, total))
    every = REFRESH if step.bar is not None else INTERVAL
    stop = threading.Event()

    def timer() -> None:
        while not stop.wait(every):
            step.tick()

    thread = threading.Thread(target=timer, name="mlit-edge-progress", daemon=True)
    thread.start()
    ok = False
    try:
        yield step
        ok = True
    finally:
        stop.set()
        thread.join()
        step.finish(ok)
