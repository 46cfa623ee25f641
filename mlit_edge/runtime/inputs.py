"""What `predict(source=...)` classifies, as a lazy stream of items: the one reading of a source for the Python API
(`Classifier.predict`, `Model.predict`) and the CLI's `mlit-edge predict` (`expand_name`).

A source is an image file; a folder (the image files directly inside it, by suffix, sorted by name: not its
sub-folders); a glob (`imgs/*.png`, the matching image files, sorted); a video file, a camera or a stream URI
(`runtime.sources.parse_source` names them; the frames are read by `video.FrameReader`, one at a time, as the
caller asks for them); a uint8 array (one HxW or HxWxC image, or an NxHxWxC batch); or a list (or an iterator) of
files, folders, globs and single-image arrays. Nothing is decoded here: files are read when their chunk is
classified, frames when the caller asks for more, so memory follows the chunk, not the source.
"""
from __future__ import annotations

import glob
import os
import re
import time
from collections.abc import Iterator as IteratorABC
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

import numpy as np

from ..artifacts.preprocess import resize_images
from ..base.messages import escape_args, not_a_file, printable
from .images import DEFAULT_MAX_PIXELS, InputError, check_array, check_batch, load_image
from .sources import LIVE_SCHEMES, VIDEO_SUFFIXES, parse_source

# what Pillow reads (images.load_image); a folder or a glob takes these, and leaves other files alone
IMAGE_SUFFIXES = (".bmp", ".gif", ".jpeg", ".jpg", ".png", ".pgm", ".pbm", ".ppm", ".pnm", ".tif", ".tiff",
                  ".webp")
URI_PREFIXES = ("csi://", "v4l2://", "gst://", "file://", *LIVE_SCHEMES)
WHAT = ("an image file, a folder, a glob, a video file, a camera or stream URI, a uint8 array (an image or an "
        "NxHxWxC batch), or a list of them")


@dataclass
class Item:
    """One image to classify: a file (`image` None until decoded), an array (as given: checked with its chunk),
    or a video frame already resized to the model's size (with the time its read and resize took)."""

    index: int
    path: str | None = None  # the file, or the video / camera / stream it is a frame of
    image: Any = None
    frame: int | None = None
    batch: np.ndarray | None = None  # the NxHxWxC array it is row `row` of
    row: int = 0
    decode_s: float = 0.0
    resize_s: float = 0.0
    where: str = ""  # how errors name it (images[i] for an array)


def is_glob(name: str) -> bool:
    return any(c in name for c in "*?[")


def expand_name(name: str | os.PathLike) -> list[Path]:
    """The files a name stands for: a folder's image files (sorted, not recursive), a glob's matching image
    files (sorted), else the name itself (a file, or a missing or odd one, which `load_image` then refuses in
    its own words). InputError for a folder with no images and a glob that matches none."""
    path = Path(name)
    if path.is_dir():
        found = sorted(p for p in path.iterdir() if p.suffix.lower() in IMAGE_SUFFIXES and p.is_file())
        if not found:
            raise InputError(f"{printable(path)} is not a regular file (it is a folder) and holds no images "
                             f"({', '.join(IMAGE_SUFFIXES)})")
        return found
    text = os.fspath(name)
    if not path.exists() and is_glob(text):
        matched = sorted(Path(p) for p in glob.glob(text) if Path(p).suffix.lower() in IMAGE_SUFFIXES
                         and Path(p).is_file())
        if not matched:
            raise InputError(f"{printable(text)}: no image file matches this pattern")
        return matched
    return [path]


def is_video(name: str | os.PathLike) -> bool:
    """Whether a name is read as video: a camera or stream URI, a pipeline, or a file with a video suffix."""
    text = os.fspath(name)
    if isinstance(name, str) and (text.startswith(URI_PREFIXES) or (" ! " in text and not Path(text).exists())):
        return True  # a Path is never a URI: it keeps one slash of "rtsp://"
    if re.fullmatch(r"/dev/video\d+", text):
        return True
    return Path(text).suffix.lower() in VIDEO_SUFFIXES


def is_live(source: Any) -> bool:
    """Whether `source` is, or a list of them holds, a camera or a stream, which never ends (checked before
    anything is opened)."""
    if isinstance(source, (list, tuple)):
        return any(is_live(s) for s in source if isinstance(s, (str, os.PathLike)))
    return isinstance(source, (str, os.PathLike)) and is_video(source) and parse_source(os.fspath(source)).live


def check_source(source: Any) -> None:
    """TypeError in one line for what is not a source at all (before any work, and before a generator starts)."""
    if source is None:
        raise TypeError(f"predict: give source=, {WHAT}")
    ok = isinstance(source, (str, os.PathLike, np.ndarray, list, tuple, IteratorABC))
    if not ok or isinstance(source, (str, bytes)) and not source:
        raise TypeError(f"predict: source={printable(repr(source))[:80]} ({type(source).__name__}) is not a source; "
                        f"give {WHAT}")
    if isinstance(source, (str, os.PathLike)):  # a missing file, an empty folder, a glob matching nothing: now
        if is_video(source):
            parse_source(os.fspath(source))
            return
        named = expand_name(source)
        kind = not_a_file(named[0]) if len(named) == 1 else None
        if kind:  # as load_image says it
            raise InputError(f"{printable(named[0])} {kind}")


def iter_items(source: Any, size: int, max_pixels: int | None = DEFAULT_MAX_PIXELS,
               camera: tuple[int, int, int] = (1280, 720, 30)) -> Iterator[Item]:
    """The items of `source` (the module docstring), lazily; video frames resized to `size` as they are read.
    The caller runs `check_source` first, so that a wrong source is refused before a generator is handed back."""
    counter = iter(range(1 << 62))
    if isinstance(source, np.ndarray) and source.ndim == 4:
        check_batch(source, max_pixels)
        for i in range(len(source)):
            yield Item(next(counter), batch=source, row=i, where=f"images[{i}]")
        return
    parts = [source] if isinstance(source, (str, os.PathLike, np.ndarray)) else source
    empty = True
    for i, part in enumerate(parts):
        empty = False
        if isinstance(part, (str, os.PathLike)) and is_video(part):
            yield from _frames(os.fspath(part), size, max_pixels, camera, counter)
        elif isinstance(part, (str, os.PathLike)):
            for path in expand_name(part):
                yield Item(next(counter), path=str(path), where=str(path))
        else:  # checked (check_array) with its chunk, in order, as files are read: the first bad one is said
            yield Item(next(counter), image=part, where=f"images[{i}]")
    if empty:
        raise InputError("empty batch: nothing to classify")


def _frames(uri: str, size: int, max_pixels: int | None, camera: tuple[int, int, int],
            counter: Iterator[int]) -> Iterator[Item]:
    """A video's frames as items, each resized to `size` as it is read, so a chunk holds small images only; the
    reader is closed when the caller stops (a generator's close), or at the end."""
    from .video import FrameReader

    with FrameReader(parse_source(uri, *camera), max_pixels=max_pixels) as reader:
        frames = iter(reader)
        while True:
            t0 = time.perf_counter()
            frame = next(frames, None)
            if frame is None:
                return
            t1 = time.perf_counter()
            small = resize_images([frame.image], size)[0]
            yield Item(next(counter), path=uri, image=small, frame=frame.index, decode_s=t1 - t0,
                       resize_s=time.perf_counter() - t1, where=f"{uri} frame {frame.index}")


def escaping(results: Iterator[Any]) -> Iterator[Any]:
    """`results` with the control characters of its errors' messages escaped, as `base.messages.escaped` does
    for a call: a generator's errors are raised while it is consumed, after the call has returned."""
    try:
        yield from results
    except Exception as e:
        escape_args(e)
        raise
    finally:
        close = getattr(results, "close", None)
        if close is not None:
            close()


def decode(item: Item, max_pixels: int | None) -> np.ndarray:
    """An item's uint8 image: a file read (`images.load_image`), an array checked (`images.check_array`), a frame
    as it was read."""
    if item.path is not None and item.image is None:
        item.image = load_image(item.path, max_pixels, keep_grey=True)
    elif item.frame is None:
        check_array(item.image, item.where, max_pixels)
    return item.image
