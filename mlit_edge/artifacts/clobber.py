"""No command writes over what it reads: every path it is about to write is compared with every path it
reads, and with the other paths it writes, before anything is opened for writing.

Two names are one file when they resolve to the same path (`..`, symbolic links, a file that does not
exist yet) or, for files that exist, when they have the same device and inode (a hard link, a bind mount).
"""
from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from .outputs import check_writable

Paths = Mapping[str, "str | Path | None"]  # what each path is, in words ("the model's sidecar") -> the path


def same_file(a: str | Path, b: str | Path) -> bool:
    """Whether `a` and `b` name one file, as the module docstring says."""
    if os.path.realpath(a) == os.path.realpath(b):
        return True
    try:
        return os.path.samefile(a, b)
    except OSError:  # one of them does not exist (yet): the paths alone decide
        return False


def refuse_clobber(writes: Paths, reads: Paths) -> None:
    """ValueError, in one line naming both, when a path in `writes` is one in `reads` or another in `writes`.
    Entries that are None (an option not given) are left out."""
    writes = {what: p for what, p in writes.items() if p is not None}
    reads = {what: p for what, p in reads.items() if p is not None}
    seen: dict[str, str | Path] = {}
    for what, path in writes.items():
        for other, other_path in [*reads.items(), *seen.items()]:
            if same_file(path, other_path):
                raise ValueError(f"{what} {path} is {other} ({other_path}): refusing to write over it; "
                                 "nothing was written, choose another path")
        seen[what] = path


def check_file_folder(path: str | Path, what: str) -> None:
    """The folder of the file `path` exists and can be written: OSError in one line otherwise, so that a bad
    path fails before the work (a video writer would only fail at its first frame, and blame the codec)."""
    folder = Path(path).parent
    if not folder.exists():
        raise FileNotFoundError(f"cannot write {what} {path}: the folder {folder} does not exist")
    if not folder.is_dir():
        raise NotADirectoryError(f"cannot write {what} {path}: {folder} is not a folder")
    check_writable(folder, f"{what}'s folder")
