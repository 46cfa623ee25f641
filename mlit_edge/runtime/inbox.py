"""The bookkeeping that makes `serve` record each image exactly once, whatever happens to the process,
the results file or the folders around it.

- **One server an inbox.** `lock` takes an exclusive `flock` on `inbox/.mlit-edge-serve.lock`; a second
  `serve` on the same inbox is refused in one line naming the first one's pid. The kernel drops the lock
  when its holder dies, kill -9 included.
- **Claim, read, record, settle.** A file is renamed into `inbox/processing/ID--NAME` (atomic) before it is
  opened, and read from there, so a file renamed onto its name meanwhile is a new file, never classified
  under the old one's row; the row carries `"id": ID` and the identity of the bytes read (inode, size,
  mtime_ns, sha256), and only then is the file moved to `done/` or `failed/`. A file that may still be being
  written goes back to the inbox (`give_back`, never over a file dropped under its name since). After a kill
  at any instant, `recover_claims` finds each claimed file: one whose ID is in the results file is settled, one
  whose ID is not goes back to the inbox to be classified. So no image gets two rows and none gets none.
- **A file that cannot be settled** (done/ not writable, another file system) stays in `processing/`,
  recorded once, with one log line; it is never classified again.
- **The results file** is appended through `ResultsLog`: a torn last line (a kill mid-write, a full disk)
  is cut off when the file is opened, a failed write is rolled back to the line before, and the file is
  reopened when it is rotated or deleted (its inode changed), so logrotate loses no rows.
"""
from __future__ import annotations

import errno
import fcntl
import json
import os
import secrets
import sys
from pathlib import Path
from typing import IO, Iterator

from ..base.messages import printable

LOCK_NAME = ".mlit-edge-serve.lock"
FOLDERS = ("processing", "done", "failed")
SEPARATOR = "--"  # processing/ID--NAME
NAME_MAX = 255  # bytes of one file name on Linux file systems
TAIL_BYTES = 1 << 20  # [ours] the results' tail searched for the rows of claimed files (one in flight at a time)


def say(message: str) -> None:
    """A line of the service's log on stderr. One that cannot be written (the log's disk is full, its pipe
    closed) is dropped: the service and its rows in --results matter more than its log."""
    try:
        print(f"mlit-edge serve: {printable(message)}", file=sys.stderr, flush=True)
    except OSError:
        pass


def lock(inbox: Path) -> IO[str]:
    """The inbox's lock, held until the returned file is closed (or the process dies)."""
    handle = open(inbox / LOCK_NAME, "a+")
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as e:
        handle.seek(0)
        holder = handle.read(64).strip() or "?"  # a pid and a newline: bounded, whatever the file holds
        handle.close()
        if e.errno in (errno.EAGAIN, errno.EACCES):
            raise RuntimeError(f"another mlit-edge serve (pid {holder}) is serving {inbox}; one server an inbox, "
                               "or two would classify the same files") from None
        raise
    handle.seek(0)
    handle.truncate()
    handle.write(f"{os.getpid()}\n")
    handle.flush()
    return handle


def free_name(folder: Path, name: str) -> Path:
    """`folder/name`, or `folder/stem-N.suffix` when a file of that name is already there (none is lost)."""
    dest, stem, suffix, n = folder / name, Path(name).stem, Path(name).suffix, 1
    while dest.exists() or dest.is_symlink():
        dest, n = folder / f"{stem}-{n}{suffix}", n + 1
    return dest


def make_folders(inbox: Path) -> None:
    """processing/, done/ and failed/; a *file* of one of those names is renamed (it is an image like any
    other) so the folder can be made, instead of failing every start."""
    for name in FOLDERS:
        d = inbox / name
        if (d.exists() or d.is_symlink()) and not d.is_dir():
            moved = free_name(inbox, d.name)
            d.replace(moved)
            say(f"{d.name} in the inbox is a file; renamed it to {moved.name}")
        d.mkdir(parents=True, exist_ok=True)


def claim(inbox: Path, f: Path) -> tuple[str, Path]:
    """Move `f` into processing/ under a fresh ID; (ID, its claimed path). OSError when it cannot be moved
    (it is then left where it was, unclassified)."""
    claim_id = secrets.token_hex(6)
    name = os.fsencode(f.name)[:NAME_MAX - len(claim_id) - len(SEPARATOR)]  # a 255-byte name still fits
    claimed = inbox / "processing" / f"{claim_id}{SEPARATOR}{os.fsdecode(name)}"
    os.rename(f, claimed)  # not replace: never over a file of that name
    return claim_id, claimed


def _same(a: Path, b: Path) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def give_back(inbox: Path, claimed: Path, name: str) -> Path | None:
    """Return an unrecorded claim to the inbox as `name`, never over a file dropped under that name since
    (then as name-N); None, with one line, when it cannot be moved (`recover_claims` returns it later)."""
    if not os.path.lexists(claimed):  # removed by someone else: nothing to give back
        return None
    dest = inbox / name
    try:
        os.link(claimed, dest)  # unlike a rename, a link never replaces what is there
        os.unlink(claimed)
        return dest
    except FileExistsError:
        if _same(claimed, dest):  # a kill between the link and the unlink: finish the move
            os.unlink(claimed)
            return dest
    except OSError:
        pass  # no hard links on this file system (vfat): a rename to a name free just before
    try:
        dest = free_name(inbox, name)
        os.rename(claimed, dest)
        return dest
    except OSError as e:
        say(f"cannot return {claimed.name} to the inbox ({e.strerror or e}); it stays in processing/")
        return None


def settle(inbox: Path, claimed: Path, name: str, where: str) -> Path | None:
    """Move a recorded claim to done/ or failed/ under its own name; None, with one log line, when it cannot
    be moved (it stays in processing/, recorded, and is not classified again)."""
    try:
        dest = free_name(inbox / where, name)
        os.rename(claimed, dest)
        return dest
    except FileNotFoundError:
        return None  # removed by someone else after it was recorded: the row stands
    except OSError as e:
        say(f"{name} is recorded, but cannot be moved to {where}/ ({e.strerror or e}); it stays in "
            f"{claimed.parent.name}/{claimed.name} and will not be classified again")
        return None


def _claimed(inbox: Path) -> Iterator[tuple[str, str, Path]]:
    folder = inbox / "processing"
    try:
        entries = sorted(folder.iterdir())
    except OSError:
        return
    for p in entries:
        claim_id, sep, name = p.name.partition(SEPARATOR)
        if sep and name and p.is_file():
            yield claim_id, name, p


def recover_claims(inbox: Path, log: "ResultsLog") -> int:
    """Finish what a killed server left in processing/: settle the files whose rows are in the results, and
    return the others to the inbox. Returns how many were returned."""
    recorded = log.recorded_ids()
    returned = 0
    for claim_id, name, path in _claimed(inbox):
        if claim_id in recorded:  # the row's path is the whole name (the claimed one may be cut to fit)
            failed, recorded_name = recorded[claim_id]
            settle(inbox, path, recorded_name or name, "failed" if failed else "done")
        elif give_back(inbox, path, name) is not None:
            returned += 1
    if returned:
        say(f"{returned} file(s) claimed by a server that was stopped before recording them: classifying them "
            "again")
    return returned


class ResultsLog:
    """The JSON-lines results file, appended one whole line at a time."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.fd = -1
        if path.exists() and not path.is_file():  # a FIFO or a device: no size to repair to nor seek in
            raise ValueError(f"--results {path} is not a regular file: serve appends whole lines to a file and cuts "
                             "a torn last line, so give it a file (follow it with tail -F)")
        self._open()

    def _open(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
        self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
        self._repair()

    def _repair(self) -> None:
        """Cut a torn last line (no newline: the writer died or the disk filled mid-line)."""
        size = os.fstat(self.fd).st_size
        if size == 0:
            return
        start = max(0, size - TAIL_BYTES)
        tail = os.pread(self.fd, size - start, start)
        if tail.endswith(b"\n"):
            return
        cut = tail.rfind(b"\n")
        keep = start + cut + 1 if cut >= 0 else (0 if start == 0 else size)
        if keep < size:
            os.ftruncate(self.fd, keep)
            say(f"cut a torn last line ({size - keep} bytes) from {self.path}")

    def _current(self) -> None:
        """Reopen when the path no longer names the open file (rotated, deleted or replaced)."""
        try:
            same = os.stat(self.path).st_ino == os.fstat(self.fd).st_ino
        except FileNotFoundError:
            same = False
        if not same:
            self._open()
            say(f"{self.path} was rotated or removed; writing to a new one")

    def write(self, row: dict) -> None:
        """Append `row` as one line; on failure (a full disk) nothing of it stays and the OSError is raised."""
        self._current()
        data = (json.dumps(row) + "\n").encode()
        before = os.fstat(self.fd).st_size
        try:
            written = os.write(self.fd, data)
            if written != len(data):
                raise OSError(errno.ENOSPC, f"short write ({written} of {len(data)} bytes)")
        except OSError:
            try:
                os.ftruncate(self.fd, before)
            except OSError:
                pass
            raise

    def recorded_ids(self) -> dict[str, tuple[bool, str | None]]:
        """The claim IDs in the file's tail, each with (whether its row is an error, the file's name)."""
        size = os.fstat(self.fd).st_size
        start = max(0, size - TAIL_BYTES)
        out = {}
        for line in os.pread(self.fd, size - start, start).splitlines():
            try:
                row = json.loads(line)
            except (json.JSONDecodeError, UnicodeDecodeError):
                continue  # the first line of the tail may start mid-row
            if isinstance(row, dict) and isinstance(row.get("id"), str):
                path = row.get("path")
                out[row["id"]] = ("error" in row, path if isinstance(path, str) and "/" not in path else None)
        return out

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
