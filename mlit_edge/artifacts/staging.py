"""A folder published whole: written under a hidden staging name beside its final path, then renamed into place
(`export-deepstream`'s OUT, `export-triton`'s REPO/NAME).

The staging folder is this process's alone: made fresh by mkdtemp (a name planted in advance is never written
through nor deleted) and named `.NAME.mlit-edge-staging-PID-XXXXXXXX`, so that it says whose it is. It is
removed when the block fails, on Ctrl-C, and on SIGTERM (the CLI's `user_errors` raises it as
`terminate.Terminated`, which unwinds through here). Only SIGKILL, or a power cut, leaves one behind: the next
run in the same folder removes it (`sweep`). A staging folder is stale when its flock(2) is free (the kernel
releases it when its process dies, in whatever pid namespace) and either its process is gone from this pid
namespace or the folder is older than `STALE_S` (the pid was reused); nothing else is touched: not a link, not
another user's folder, not a name this module did not make.
"""
from __future__ import annotations

import contextlib
import fcntl
import os
import re
import shutil
import tempfile
import time
from pathlib import Path
from typing import Iterator, List

from .sidecar import current_umask

MARK = ".mlit-edge-staging-"
STALE_S = 3600.0  # [ours] an export takes seconds; an hour-old staging folder whose lock is free is nobody's
_NAME = re.compile(r"\..*" + re.escape(MARK) + r"([0-9]+)-[A-Za-z0-9_]+")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)  # kill(2) with signal 0: only the existence and permission checks are made
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process holds that pid
        return True
    return True


def _lock(fd: int, block: bool) -> bool:
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | (0 if block else fcntl.LOCK_NB))
    except OSError:
        return False
    return True


def sweep(parent: str | Path) -> List[Path]:
    """Remove the staging folders in `parent` that killed runs left (see the module docstring); the ones removed."""
    removed: List[Path] = []
    try:
        entries = list(os.scandir(parent))
    except OSError:  # no folder yet, or not readable: nothing of ours there
        return removed
    for entry in entries:
        match = _NAME.fullmatch(entry.name)
        if not match or not entry.is_dir(follow_symlinks=False):
            continue
        try:
            st = entry.stat(follow_symlinks=False)
            fd = os.open(entry.path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
        except OSError:
            continue
        try:
            if st.st_uid != os.getuid() or not _lock(fd, block=False):
                continue  # another user's, or a run writing it now
            if _alive(int(match.group(1))) and time.time() - st.st_mtime < STALE_S:
                continue  # its maker may be between mkdtemp and its flock
            shutil.rmtree(entry.path, ignore_errors=True)
            removed.append(Path(entry.path))
        finally:
            os.close(fd)
    return removed


@contextlib.contextmanager
def staged_folder(final: str | Path) -> Iterator[Path]:
    """A fresh, private, locked staging folder beside `final` (stale ones of killed runs removed first); when the
    block ends without an error it gets the usual permissions and is renamed to `final`, which must not exist
    then (FileExistsError, and nothing published). Removed on any error, KeyboardInterrupt and SIGTERM included."""
    final = Path(final)
    sweep(final.parent)
    staging = Path(tempfile.mkdtemp(prefix=f".{final.name[:80]}{MARK}{os.getpid()}-", dir=final.parent))
    fd = os.open(staging, os.O_RDONLY | os.O_DIRECTORY)
    try:
        _lock(fd, block=True)  # held until the folder is renamed or removed: `sweep` leaves it alone
        yield staging
        # mkdtemp's 0700 kept others out while it was written; the published folder gets the usual permissions
        os.chmod(staging, 0o777 & ~current_umask())  # (Triton and DeepStream may run as another user)
        if os.path.lexists(final):  # a dangling link too: it is someone's (rename(2) would replace an empty folder)
            raise FileExistsError(f"{final} appeared meanwhile; remove it or choose another name")
        os.rename(staging, final)  # the folder appears whole or not at all
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)  # made by mkdtemp above, in this call: ours to remove
        raise
    finally:
        os.close(fd)


__all__ = ["MARK", "STALE_S", "sweep", "staged_folder"]
