"""Images into the runtime: files decoded by Pillow, arrays checked, both as uint8 HxWxC."""
from __future__ import annotations

from pathlib import Path

import numpy as np


class InputError(ValueError):
    """Input the runtime will not classify: the message says what is wrong with it."""


def load_image(path: str | Path) -> np.ndarray:
    """A file as uint8 HxWx3 RGB (Pillow decodes it); InputError for anything that is not an image."""
    path = Path(path)
    if not path.is_file():
        raise InputError(f"{path}: no such file")
    try:
        from PIL import Image, UnidentifiedImageError
    except ImportError:
        raise InputError("reading image files needs Pillow (pip install pillow); or pass uint8 arrays") from None
    try:
        with Image.open(path) as img:
            img.load()  # decode now, so a truncated file fails here and not later
            return np.asarray(img.convert("RGB"), dtype=np.uint8)
    except UnidentifiedImageError:
        raise InputError(f"{path}: not an image file Pillow can read") from None
    except (OSError, SyntaxError, ValueError) as e:  # truncated or corrupt data
        raise InputError(f"{path}: corrupt image ({str(e).splitlines()[0][:120]})") from None


def check_array(a: np.ndarray, where: str) -> np.ndarray:
    """`a` when it is one raw uint8 image (HxW or HxWxC, C in 1, 3, 4); InputError saying why not."""
    if not isinstance(a, np.ndarray):
        raise InputError(f"{where}: expected a numpy array or a file path, got {type(a).__name__}")
    if a.dtype != np.uint8:
        if np.issubdtype(a.dtype, np.floating) and np.isnan(a).any():
            raise InputError(f"{where}: contains NaN; pass the raw uint8 pixels")
        raise InputError(f"{where}: dtype {a.dtype}; pass raw uint8 pixels (HxW or HxWxC), the runtime "
                         "normalises them")
    if a.ndim not in (2, 3) or (a.ndim == 3 and a.shape[2] not in (1, 3, 4)) or min(a.shape[:2]) < 1:
        raise InputError(f"{where}: shape {a.shape}; expected HxW or HxWxC with C in 1, 3, 4")
    return a
