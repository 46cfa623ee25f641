"""Eval preprocessing with numpy alone: the single definition shared by training and the runtime.

An image (uint8, HxW gray or HxWxC with C in {1, 3, 4}) is resized to 36x36 with antialiased
bilinear filtering (PIL's and torchvision's `antialias=True` semantics, half-pixel centres), rounded
back to uint8, then scaled to [0, 1] and normalised per channel. Training stores its datasets after
the first step and normalises on the device; the runtime does all of it here.
"""
from __future__ import annotations

from functools import lru_cache
from typing import Sequence

import numpy as np

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


DENSE_MAX = 4096  # [ours] lengths up to this are resized by a cached dense matrix (<= 1.2 MB); longer by bands


@lru_cache(maxsize=32)
def resize_weights(n_in: int, n_out: int) -> np.ndarray:
    """(n_out, n_in) matrix of a 1-D antialiased bilinear resize; rows sum to 1.

    Output pixel i samples the input at centre (i + 0.5) * n_in / n_out with a triangle filter that
    is widened by the scale when shrinking, so downsampling averages instead of aliasing.
    """
    scale = n_in / n_out
    support = max(scale, 1.0)
    centres = (np.arange(n_out) + 0.5) * scale  # (n_out,)
    dist = (np.arange(n_in)[None, :] + 0.5 - centres[:, None]) / support  # (n_out, n_in)
    w = np.clip(1.0 - np.abs(dist), 0.0, None)
    return w / w.sum(axis=1, keepdims=True)


def resize_band(n_in: int, n_out: int, i: int) -> tuple[int, np.ndarray]:
    """Row `i` of `resize_weights(n_in, n_out)` as its band of nonzero weights: (first input index,
    weights). Built one output at a time, so a 1 x 10^6 image never holds a 36 x 10^6 matrix."""
    scale = n_in / n_out
    support = max(scale, 1.0)
    centre = (i + 0.5) * scale
    k = min(n_in, int(np.ceil(2 * support)) + 2)  # covers every j with |j + 0.5 - centre| < support
    start = min(max(int(np.floor(centre - support - 0.5)), 0), n_in - k)
    w = np.clip(1.0 - np.abs((np.arange(start, start + k) + 0.5 - centre) / support), 0.0, None)
    return start, w / w.sum()


def _resample(x: np.ndarray, axis: int, size: int) -> np.ndarray:
    """`x` (n, H, W, C), uint8 or float64, resized to `size` along `axis` (1 or 2) by the banded filter,
    as float64 with 3 channels. Each band is converted on its own, so the working set is one band."""
    shape = [*x.shape[:3], 3]
    shape[axis] = size
    out = np.empty(shape)
    for i in range(size):
        s, w = resize_band(x.shape[axis], size, i)
        band = (x[:, s:s + len(w)] if axis == 1 else x[:, :, s:s + len(w)])[..., :3].astype(np.float64)
        if band.shape[-1] == 1:
            band = np.repeat(band, 3, axis=-1)
        target = (slice(None), i) if axis == 1 else (slice(None), slice(None), i)
        out[target] = np.tensordot(band, w, axes=([axis], [0]))
    return out


def _as_hwc(image: np.ndarray) -> np.ndarray:
    """One image as uint8 HxWxC (a gray HxW gets its channel axis)."""
    a = np.asarray(image)
    if a.dtype != np.uint8:
        raise TypeError(f"images must be uint8 arrays, got {a.dtype}")
    if a.ndim == 2:
        a = a[:, :, None]
    if a.ndim != 3 or a.shape[2] not in (1, 3, 4) or min(a.shape[:2]) < 1:
        raise ValueError(f"expected an HxW or HxWxC image with C in 1, 3, 4; got shape {a.shape}")
    return a


RESIZE_BUDGET = 64 << 20  # [ours] bytes of float64 working memory one resize step may use


def _resize_batch(batch: np.ndarray, size: int, budget: int) -> np.ndarray:
    """uint8 (N, H, W, C) -> uint8 (N, size, size, 3), in steps whose float64 working set stays near
    `budget` bytes: whole images while they fit, else column slices of one image. An image wider than
    `DENSE_MAX` and than it is tall (1 x 10^6 px) is resized transposed, its long side first, so that its
    rows resized never take 36 x W."""
    N, H, W, C = batch.shape
    if W > max(H, DENSE_MAX):
        return _resize_batch(batch.transpose(0, 2, 1, 3), size, budget).transpose(0, 2, 1, 3)
    rows = resize_weights(H, size) if H <= DENSE_MAX else None  # (S, H)
    cols = resize_weights(W, size) if W <= DENSE_MAX else None  # (S, W)
    out = np.empty((N, size, size, 3), np.uint8)
    step = max(1, budget // (max(H, size) * max(W, size) * 3 * 8))
    for i in range(0, N, step):
        block = batch[i:i + step]
        n = len(block)
        first = np.empty((n, size, W, 3))  # each image's rows resized: (n, S, W, 3)
        width = max(1, budget // (n * H * 3 * 8)) if rows is not None else W  # bands bound themselves
        for c in range(0, W, width):
            if rows is None:
                first[:] = _resample(block, 1, size)
                continue
            part = block[:, :, c:c + width, :3].astype(np.float64)  # (n, H, w, C<=3)
            if C == 1:
                part = np.repeat(part, 3, axis=-1)
            w = part.shape[2]
            first[:, :, c:c + w] = (rows @ part.reshape(n, H, w * 3)).reshape(n, size, w, 3)
        x = _resample(first, 2, size) if cols is None else np.matmul(cols, first)  # (n, S, S, 3)
        out[i:i + n] = np.clip(np.rint(x), 0.0, 255.0)  # float bounds: int ones took 0.45 s on 4000 images
    return out


def resize_images(images: np.ndarray | Sequence[np.ndarray], size: int = 36,
                  budget: int = RESIZE_BUDGET) -> np.ndarray:
    """uint8 image(s) of any size -> uint8 (N, size, size, 3). A 4-D array is one batch of equal size.

    Memory stays proportional to `budget`, not to the input: a batch of video frames or one huge
    image is resized in bounded steps.
    """
    batches = [images] if isinstance(images, np.ndarray) and images.ndim == 4 else [_as_hwc(img)[None]
                                                                                     for img in images]
    out = []
    for batch in batches:
        if batch.dtype != np.uint8:
            raise TypeError(f"images must be uint8 arrays, got {batch.dtype}")
        if batch.shape[1:3] == (size, size):
            out.append(np.repeat(batch, 3, axis=-1) if batch.shape[-1] == 1 else batch[..., :3])
        else:
            out.append(_resize_batch(batch, size, budget))
    return np.concatenate(out, axis=0)


def normalize(images: np.ndarray, mean: Sequence[float], std: Sequence[float]) -> np.ndarray:
    """uint8 (N, S, S, 3) -> float32 (N, 3, S, S): x / 255, minus mean, over std, per channel."""
    x = images.astype(np.float32) / np.float32(255.0)
    x = (x - np.asarray(mean, np.float32)) / np.asarray(std, np.float32)
    return np.ascontiguousarray(x.transpose(0, 3, 1, 2))


def preprocess(images: np.ndarray | Sequence[np.ndarray], mean: Sequence[float], std: Sequence[float],
               size: int = 36) -> np.ndarray:
    """The eval preprocessing: uint8 image(s) of any size -> float32 (N, 3, size, size) model input."""
    return normalize(resize_images(images, size), mean, std)
