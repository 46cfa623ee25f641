"""SIGTERM as an exception, and ending a child process (and its group) the same way.

Python's default for SIGTERM is to die at once: no `finally` runs, so every temporary a command made
(bench's `mlit-bench-*` folder, a file half-written beside its output) stays for good. Raised as
`Terminated` instead, SIGTERM unwinds like Ctrl-C's KeyboardInterrupt, and context managers clean up.
`Terminated` is a BaseException, as KeyboardInterrupt is, so that no `except Exception` takes it for a
failure of the step it interrupted.
"""
from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import Iterator

GRACE_S = 2.0  # [ours] how long a child gets to end on SIGTERM before it (and its group) is killed
EXIT_CODE = 128 + signal.SIGTERM  # the shell's status for a process ended by SIGTERM (bash(1), EXIT STATUS)


class Terminated(BaseException):
    """SIGTERM arrived: the command unwinds, its `finally` blocks run, and the CLI exits with `EXIT_CODE`."""


def _raise(signum, _frame) -> None:
    raise Terminated(f"terminated (signal {signum})")


@contextlib.contextmanager
def sigterm_raises() -> Iterator[None]:
    """Within the block, SIGTERM raises `Terminated` in the main thread; the previous handler comes back after.
    Outside the main thread (where Python lets no handler be set) this does nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old = signal.signal(signal.SIGTERM, _raise)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, old)


def exited(pid: int) -> bool:
    """Whether child `pid` has exited, without reaping it: while unreaped its pid (and so its process group's
    id) cannot be given to another process, so a later killpg cannot reach a stranger (waitid(2), WNOWAIT)."""
    try:
        return os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
    except ChildProcessError:  # already reaped
        return True


def group_running(pgid: int) -> bool:
    """Whether a process of group `pgid` still runs. Zombies do not count: an orphan the kernel gave to an init
    that never reaps (a container's) stays one for good, and kill(2) would find it. Linux reads /proc
    (proc(5): field 5 of /proc/PID/stat is the group, field 3 the state); elsewhere kill(2) answers."""
    proc = Path("/proc")
    if not proc.is_dir():
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:  # there, but not ours to signal
            pass
        return True
    for stat in proc.glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()  # after the command name, which may hold spaces
        except (OSError, IndexError):
            continue  # it ended while we looked
        if len(fields) > 2 and fields[2] == str(pgid) and fields[0] not in ("Z", "X"):
            return True
    return False


def end_process(proc: subprocess.Popen, grace_s: float = GRACE_S, group: bool = False) -> None:
    """End `proc`: SIGTERM, then SIGKILL if it still runs `grace_s` later. With `group` (a child started with
    `start_new_session=True`) both go to its whole process group, so the children it forked end with it,
    and whatever of the group outlives its leader is killed."""
    if proc.returncode is not None:
        return

    def send(sig: int) -> None:
        try:
            os.killpg(proc.pid, sig) if group else os.kill(proc.pid, sig)
        except (ProcessLookupError, PermissionError):  # gone already (a zombie group member may refuse)
            pass

    send(signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while not exited(proc.pid) and time.monotonic() < deadline:
        time.sleep(0.02)
    if group or not exited(proc.pid):  # the leader is unreaped here: its group id still names only its group
        send(signal.SIGKILL)
    # SIGKILL is delivered when each process next runs: wait (bounded) until none of the group does
    while group and group_running(proc.pid) and time.monotonic() < deadline + grace_s:
        time.sleep(0.01)
    proc.wait()
