"""ImageFolder datasets (one sub-folder of images per class), walked and decoded without torchvision.

The walk follows symbolic links, as torchvision's does, but refuses a link that leads back into a folder
it is already inside (a loop that would otherwise walk forever) and reads a folder reached twice through
links once. Files are decoded by the runtime's own reader (`runtime.images.load_image`), so training sees
the pixels `predict` sees: 16-bit images scaled the same way, the same pixel cap, and a bomb or a corrupt
file refused in one line naming it.
"""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from ..runtime.images import DEFAULT_MAX_PIXELS, InputError, load_image
from ..artifacts.preprocess import resize_images

# torchvision's IMG_EXTENSIONS, so a folder it accepted is read the same
EXTENSIONS = (".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp")


def _walk(folder: Path, ancestors: tuple[tuple[int, int], ...], seen: set, files: list[Path]) -> None:
    st = os.stat(folder)
    key = (st.st_dev, st.st_ino)
    if key in ancestors:
        raise ValueError(f"{folder} is a symbolic link loop (it leads back into a folder above it); "
                         "remove the link")
    if key in seen:  # the same folder linked twice from one class: its images count once
        return
    seen.add(key)
    try:
        entries = sorted(os.scandir(folder), key=lambda e: e.name)
    except OSError as e:
        raise ValueError(f"cannot list {folder}: {e.strerror or e}") from None
    for entry in entries:
        path = Path(entry.path)
        try:
            is_dir = entry.is_dir()
        except OSError:  # a dangling or self-referencing link: not an image, not a folder
            continue
        if is_dir:
            _walk(path, (*ancestors, key), seen, files)
        elif entry.name.lower().endswith(EXTENSIONS) and entry.is_file():
            files.append(path)


def scan(root: str | Path) -> tuple[list[str], list[tuple[Path, int]]]:
    """The class names (sorted sub-folder names) and every (image file, class index) under `root`."""
    root = Path(root)
    try:
        classes = sorted(e.name for e in os.scandir(root) if e.is_dir())
    except OSError as e:
        raise FileNotFoundError(f"{root} is not an ImageFolder (one sub-folder of images per class): "
                                f"{e.strerror or e}") from None
    if not classes:
        raise FileNotFoundError(f"{root} is not an ImageFolder: it has no sub-folders (one per class)")
    samples: list[tuple[Path, int]] = []
    for index, name in enumerate(classes):
        files: list[Path] = []
        _walk(root / name, (), set(), files)
        if not files:
            raise FileNotFoundError(f"{root}: class folder {name!r} holds no images ({', '.join(EXTENSIONS)})")
        samples += [(f, index) for f in files]
    return classes, samples


def read_images(paths: list, size: int, max_pixels: int | None = DEFAULT_MAX_PIXELS) -> np.ndarray:
    """Image files as uint8 (N, size, size, 3), each decoded and resized on its own (bounded memory)."""
    out = np.empty((len(paths), size, size, 3), np.uint8)
    for i, p in enumerate(paths):
        try:
            out[i] = resize_images([load_image(p, max_pixels, keep_grey=True)], size)[0]
        except InputError as e:
            raise ValueError(f"cannot read image {e}") from None
    return out
