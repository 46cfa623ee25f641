"""Images into the runtime: files decoded by Pillow, arrays checked, both as uint8 HxWxC.

Hostile files get a one-line `InputError`, never a traceback or a runaway allocation: the pixel
count is read from the header and checked against `max_pixels` before anything is decoded, and
Pillow's own decompression-bomb guard is turned into the same error. Modes that are not 8 bits per
channel are converted by rule or refused with the reason, never clipped silently: 16-bit images are
scaled by 255/65535, float images in [0, 1] by 255; floats outside [0, 1], 32-bit integers and
modes without a defined RGB conversion are refused.
"""
from __future__ import annotations

from pathlib import Path
from typing import BinaryIO

import numpy as np

from ..base.messages import first_line, not_a_file, printable

DEFAULT_MAX_PIXELS = 50_000_000  # [ours] 50 MP: a 8660x5773 photo; the decoded RGB is 150 MB


def pixel_limit(max_pixels: int) -> str:
    """A pixel limit as a person reads it: "50.0 MP", or "1,000 px" below a tenth of one."""
    return f"{max_pixels / 1e6:.1f} MP" if max_pixels >= 100_000 else f"{max_pixels:,} px"


class InputError(ValueError):
    """Input the runtime will not classify: the message says what is wrong with it."""


def _pillow():
    try:
        from PIL import Image
    except ImportError:
        raise InputError("reading image files needs Pillow (pip install pillow); or pass uint8 arrays") from None
    return Image


def _integer_kind(img) -> str:
    """What Pillow's mode I holds, from the TIFF tags where there are some (it widens signed 16-bit
    TIFFs to I, so the mode alone would call them 32-bit)."""
    tags = getattr(img, "tag_v2", None) or {}
    bits, fmt = tags.get(258), tags.get(339)  # BitsPerSample, SampleFormat (1 unsigned, 2 signed)
    bits = bits[0] if isinstance(bits, tuple) and bits else bits
    fmt = fmt[0] if isinstance(fmt, tuple) and fmt else fmt
    if isinstance(bits, int) and 0 < bits <= 64:
        return f"{'signed' if fmt == 2 else 'unsigned' if fmt == 1 else ''} {bits}-bit integer".strip()
    return "32-bit integer"


def _channels(grey: np.ndarray, keep_grey: bool) -> np.ndarray:
    """uint8 HxW as HxWx1 (`keep_grey`) or as the HxWx3 RGB that Pillow's L -> RGB conversion gives."""
    return grey[:, :, None] if keep_grey else np.repeat(grey[:, :, None], 3, axis=2)


def _to_rgb8(img, path: Path, keep_grey: bool = False) -> np.ndarray:
    """A decoded Pillow image as uint8 HxWx3, by the rules in the module docstring; single-channel images
    as HxWx1 with `keep_grey` (the same pixels in a third of the memory)."""
    mode = img.mode
    if mode.startswith("I;16") or (mode == "I" and img.format == "PNG"):  # PNG holds at most 16 bits
        a = np.asarray(img, dtype=np.float64)
        return _channels(np.rint(a * (255.0 / 65535.0)).astype(np.uint8), keep_grey)
    if mode == "I":
        raise InputError(f"{path}: {_integer_kind(img)} pixels have no defined 8-bit scale; save it as unsigned 8 "
                         "or 16 bits")
    if mode == "F":
        a = np.asarray(img, dtype=np.float64)
        if not np.isfinite(a).all():
            raise InputError(f"{path}: float image with NaN or infinite pixels")
        lo, hi = float(a.min()), float(a.max())
        if lo < 0.0 or hi > 1.0:
            raise InputError(f"{path}: float image with values in [{lo:g}, {hi:g}]; expected [0, 1] "
                             "(save it as 8 or 16 bits)")
        return _channels(np.rint(a * 255.0).astype(np.uint8), keep_grey)
    if mode not in ("1", "L", "LA", "P", "PA", "RGB", "RGBA", "RGBX", "CMYK", "YCbCr", "La"):
        raise InputError(f"{path}: image mode {mode} has no defined RGB conversion")
    if keep_grey and mode in ("1", "L", "LA", "La"):
        return _channels(np.asarray(img if mode == "L" else img.convert("L"), dtype=np.uint8), True)
    return np.asarray(img.convert("RGB"), dtype=np.uint8)  # alpha is dropped, as training never saw any


def load_image(path: str | Path, max_pixels: int | None = DEFAULT_MAX_PIXELS, keep_grey: bool = False) -> np.ndarray:
    """A file as uint8 HxWx3 RGB; InputError for anything that is not an image we can read safely.

    `max_pixels` (None: no limit) is checked on the header's size before anything is decoded.
    `keep_grey` returns a single-channel file as HxWx1, which `resize_images` takes as it takes RGB,
    with a third of the memory (a 20-Mpx grey PNG: 20 MB, not 60).
    """
    path = Path(path)
    kind = not_a_file(path)  # a FIFO or a device would block or never end: only regular files are read
    if kind:
        raise InputError(f"{printable(path)} {kind}")
    return decode_image(path, path, max_pixels, keep_grey)


def decode_image(source: Path | BinaryIO, path: str | Path, max_pixels: int | None = DEFAULT_MAX_PIXELS,
                 keep_grey: bool = False) -> np.ndarray:
    """`load_image` of a regular file's path or of a binary file already open on one (read from its start;
    left open); `path` names it in the errors."""
    Image = _pillow()
    from PIL import UnidentifiedImageError

    try:
        with Image.open(source) as img:
            w, h = img.size
            if max_pixels is not None and w * h > max_pixels:
                raise InputError(f"{path}: {w}x{h} is {w * h / 1e6:.1f} MP, over the limit of "
                                 f"{max_pixels / 1e6:.1f} MP (raise it with --max-pixels)")
            img.load()  # decode now, so a truncated file fails here and not later
            return _to_rgb8(img, path, keep_grey)
    except InputError:
        raise
    except UnidentifiedImageError:
        raise InputError(f"{path}: not an image file Pillow can read") from None
    except Image.DecompressionBombError as e:  # its own header check, below ours when the limit is raised
        raise InputError(f"{path}: refused as a decompression bomb ({first_line(e, 120)})") from None
    except MemoryError:
        raise InputError(f"{path}: not enough memory to decode it") from None
    except (OSError, SyntaxError, ValueError, EOFError) as e:  # truncated or corrupt data
        raise InputError(f"{path}: corrupt image ({first_line(e, 120)})") from None


def check_array(a: np.ndarray, where: str, max_pixels: int | None = DEFAULT_MAX_PIXELS) -> np.ndarray:
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
    if max_pixels is not None and a.shape[0] * a.shape[1] > max_pixels:
        raise InputError(f"{where}: {a.shape[1]}x{a.shape[0]} is over the limit of {max_pixels / 1e6:.1f} MP")
    return a


def check_batch(images: np.ndarray, max_pixels: int | None = DEFAULT_MAX_PIXELS) -> np.ndarray:
    """`images` when it is a non-empty NxHxWxC uint8 batch (its first image checked as `check_array` checks one:
    the rows share a shape); InputError saying why not."""
    if len(images) == 0:
        raise InputError("empty batch: nothing to classify")
    if images.dtype != np.uint8:
        check_array(images, "images")  # raises with the dtype (or NaN) in the message
    check_array(images[0], "images[0]", max_pixels)
    return images
