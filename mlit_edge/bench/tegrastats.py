"""`tegrastats` as bench runs it: a child that is not trusted to behave.

Whatever `tegrastats` is first on PATH is run, and what it prints is read line by line while the model is
timed, in the bench's own process (its memory is counted as the model's). So each line is read with a cap
(`LINE_MAX`: a line that never ends is dropped and counted, not buffered), decoded tolerantly (a byte that
is not UTF-8 becomes U+FFFD, the rest of the line still parses), and the reading thread never dies of what
it reads. The child runs in its own session, and its whole process group is ended when bench stops (SIGTERM,
then SIGKILL: `base.terminate.end_process`), so a `tegrastats` wrapper that forks leaves nothing behind.
When its output ends, or it exits while something it forked holds its output open, the time of its last
line is kept (`ended_at`), for the power figures to say what they cover.
"""
from __future__ import annotations

import subprocess
import threading
import time
import weakref
from typing import BinaryIO, Callable, Iterator, List, Optional

from ..base.terminate import GRACE_S, end_process, exited

LINE_MAX = 16 * 1024  # [ours] the longest line read: tegrastats' are under 1 KiB on each board in tests/data/tegrastats


class BoundedLines:
    """The lines of a binary stream as text, none longer than `limit` bytes: a longer one is read past in
    pieces of at most `limit` bytes, dropped and counted in `dropped`. `largest` is the most bytes one read
    held, what the cap bounds."""

    def __init__(self, stream: BinaryIO, limit: int = LINE_MAX) -> None:
        self.stream, self.limit = stream, limit
        self.dropped = self.largest = 0

    def _piece(self) -> bytes:
        piece = self.stream.readline(self.limit + 1)  # io.BufferedReader.readline(size): at most size bytes
        self.largest = max(self.largest, len(piece))
        return piece

    def __iter__(self) -> Iterator[str]:
        while True:
            piece = self._piece()
            if not piece:
                return
            if len(piece) > self.limit and not piece.endswith(b"\n"):  # over the cap: skip to its end
                while piece and not piece.endswith(b"\n"):
                    piece = self._piece()
                self.dropped += 1
                continue
            yield piece.decode("utf-8", "replace")


class Tegrastats:
    """`command` running in its own session; each line it prints goes to `on_line(text, perf_counter time)`
    from a reading thread. `error` says why it did not start or could not be read."""

    def __init__(self, command: List[str], on_line: Callable[[str, float], None]) -> None:
        self.command, self.on_line = command, on_line
        self.error: Optional[str] = None
        self.closed_at: Optional[float] = None  # when its output ended
        self.last_at: Optional[float] = None  # when its last line was read
        self.lines: Optional[BoundedLines] = None
        self._proc: Optional[subprocess.Popen] = None
        self._reader: Optional[threading.Thread] = None
        self._finalizer: Optional[weakref.finalize] = None

    def start(self) -> None:
        try:  # its own session and group: ended with everything it forked (setsid(2), via Popen)
            self._proc = subprocess.Popen(self.command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                          stdin=subprocess.DEVNULL, start_new_session=True)
        except OSError as e:
            self.error = f"tegrastats did not start ({e.strerror or e})"
            return
        # ended with the interpreter too, should the bench fail before `stop`: it would run on forever
        self._finalizer = weakref.finalize(self, end_process, self._proc, GRACE_S, True)
        self.lines = BoundedLines(self._proc.stdout)
        self._reader = threading.Thread(target=self._read, name="tegrastats", daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.lines is not None
        try:
            for line in self.lines:
                self.last_at = time.perf_counter()
                self.on_line(line, self.last_at)
        except (OSError, ValueError) as e:  # the pipe failed, or was closed under the read
            self.error = f"tegrastats could not be read ({e}): power not measured"
        finally:
            self.closed_at = time.perf_counter()

    @property
    def ended_at(self) -> Optional[float]:
        """When its output ended: at its end, or at its last line when it exited (unreaped, so asking reaps
        nothing) but a child it forked holds the pipe open; None while it runs."""
        if self.closed_at is not None:
            return self.closed_at
        if self._proc is not None and self._proc.returncode is None and exited(self._proc.pid):
            return self.last_at if self.last_at is not None else -float("inf")
        return None

    def stop(self) -> None:
        """End its process group (SIGTERM, then SIGKILL) and its reader."""
        if self._finalizer is not None:
            self._finalizer()  # end_process, once
        if self._reader is not None:
            self._reader.join(timeout=GRACE_S)
        if self._proc is not None and self._proc.stdout is not None and not self._reader.is_alive():
            self._proc.stdout.close()
