"""What nvinfer's crop-and-scale in secondary mode (`export-deepstream --secondary`) can do to the shipped model's
answers: each test digit pasted at a random place in a 1280x720 frame at a given size, cropped at the box a
detector would give (the pasted tile, or the tight box around the ink), its edges jittered, then scaled to 36x36
as nvinfer does with OpenCV standing in for the GPU/VIC scaler: nearest and bilinear (scaling-filter 0 and 1,
stretched: maintain-aspect-ratio=0), and bilinear with the aspect kept (maintain-aspect-ratio=1, padded black
at the right and bottom, or on both sides with symmetric-padding=1). Top-1 on the whole mnist5k test split
(1000 digits, ONNX Runtime), next to the reference (the digits as stored, our preprocessing).

Replayed from DeepStream 6.2 (sources/gst-plugins/gst-nvinfer/gstnvinfer.cpp): get_converted_buffer's crop
(left and top rounded up to even, width and height down) and its aspect-kept size and padding; objects under
16x16 are never classified (MIN_INPUT_OBJECT_WIDTH/HEIGHT, gst_nvinfer_start), counted here as wrong.

    python benchmarks/deepstream_crops.py [--onnx model.onnx] [--full]   # default: exports pretrained:xxs-mnist5k
"""
from __future__ import annotations

import argparse
import hashlib
import tempfile
import time
from pathlib import Path

import numpy as np

FRAME_W, FRAME_H, NET = 1280, 720, 36
# the pasted 28x28 tile's side in the frame (its ink is about 20/28 of it), and how far each box edge moves (a
# share of the box's width or height): a grid that runs in about 2 minutes on 2 CPU cores, and --full's
SIZES, JITTERS = (28, 120), (0.0, 0.2)
FULL_SIZES, FULL_JITTERS = (20, 28, 36, 48, 72, 120), (0.0, 0.1, 0.2)
MIN_OBJECT = 16  # gstnvinfer.cpp MIN_INPUT_OBJECT_WIDTH/HEIGHT


def ink_box(digit: np.ndarray) -> tuple[int, int, int, int]:
    """x, y, w, h of a 28x28 digit's non-zero pixels: the box a detector of digits would draw."""
    ys, xs = np.nonzero(digit)
    return int(xs.min()), int(ys.min()), int(xs.max() - xs.min() + 1), int(ys.max() - ys.min() + 1)


def nvinfer_rect(left: float, top: float, width: float, height: float) -> tuple[int, int, int, int]:
    """gstnvinfer.cpp get_converted_buffer: GST_ROUND_UP_2 of the (unsigned) left and top, GST_ROUND_DOWN_2 of
    the width and height."""
    up, down = (lambda v: (int(v) + 1) & ~1), (lambda v: int(v) & ~1)
    return up(left), up(top), down(width), down(height)


def scale(crop: np.ndarray, how: str) -> np.ndarray:
    """A grey crop to NET x NET as nvinfer's scaler would: stretched (nearest or bilinear), or bilinear with
    the aspect kept (get_converted_buffer: the destination size truncated, the rest black)."""
    import cv2

    if how in ("nearest", "bilinear"):
        flag = cv2.INTER_NEAREST if how == "nearest" else cv2.INTER_LINEAR
        return cv2.resize(crop, (NET, NET), interpolation=flag)
    h, w = crop.shape
    dw, dh = (NET, int(NET * h / w)) if NET * h / w <= NET else (int(NET * w / h), NET)
    out = np.zeros((NET, NET), np.uint8)
    x, y = ((NET - dw) // 2, (NET - dh) // 2) if how == "aspect, centred" else (0, 0)  # symmetric-padding=1
    out[y:y + dh, x:x + dw] = cv2.resize(crop, (max(dw, 1), max(dh, 1)), interpolation=cv2.INTER_LINEAR)
    return out


RESIZES = ("nearest", "bilinear", "aspect, right-bottom", "aspect, centred")


def crops(digits: np.ndarray, size: int, box: str, jitter: float, seed: int) -> list:
    """Each digit pasted at `size` px at a random place of a black frame, cropped at its box (jittered, clamped
    to the frame, rounded as nvinfer rounds); None for an object nvinfer would not classify (under 16 px)."""
    import cv2

    rng = np.random.default_rng(seed)
    frame = np.zeros((FRAME_H, FRAME_W), np.uint8)
    out = []
    for digit in digits:
        tile = cv2.resize(digit, (size, size), interpolation=cv2.INTER_AREA if size < 28 else cv2.INTER_LINEAR)
        x0, y0 = int(rng.integers(0, FRAME_W - size + 1)), int(rng.integers(0, FRAME_H - size + 1))
        frame[y0:y0 + size, x0:x0 + size] = tile
        bx, by, bw, bh = (0, 0, 28, 28) if box == "tile" else ink_box(digit)
        k = size / 28
        left, top, right, bottom = x0 + bx * k, y0 + by * k, x0 + (bx + bw) * k, y0 + (by + bh) * k
        dl, dr, dt, db = rng.uniform(-jitter, jitter, 4)
        left, right = max(0.0, left + dl * bw * k), min(float(FRAME_W), right + dr * bw * k)
        top, bottom = max(0.0, top + dt * bh * k), min(float(FRAME_H), bottom + db * bh * k)
        x, y, w, h = nvinfer_rect(left, top, max(right - left, 0.0), max(bottom - top, 0.0))
        out.append(frame[y:y + h, x:x + w].copy() if w >= MIN_OBJECT and h >= MIN_OBJECT else None)
        frame[y0:y0 + size, x0:x0 + size] = 0
    return out


def main() -> None:
    from mlit_edge.artifacts.preprocess import normalize, resize_images
    from mlit_edge.runtime.runners import OnnxRuntimeRunner, predict_all
    from mlit_edge.artifacts.sidecar import read_sidecar
    from mlit_edge.train.data import mnist5k_raw

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--onnx", type=Path, default=None, help="an fp32 export of the shipped model")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--full", action="store_true", help="every size 20-120 and jitter 0, 0.1, 0.2 (13 min here)")
    args = ap.parse_args()
    start = time.perf_counter()
    onnx = args.onnx
    if onnx is None:
        import mlit_edge

        out = str(Path(tempfile.mkdtemp()) / "m.onnx")
        onnx = mlit_edge.load("pretrained:xxs-mnist5k").export(out=out, precision="fp32").path
    pre = read_sidecar(Path(onnx))["preprocess"]
    pixels, labels = mnist5k_raw("test")  # uint8 (N, 28, 28), as the data set ships them
    sizes, jitters = (FULL_SIZES, FULL_JITTERS) if args.full else (SIZES, JITTERS)
    seen: dict = {}  # identical inputs (a square crop kept or stretched) run once: ONNX Runtime is the cost here
    with OnnxRuntimeRunner(onnx) as run:
        def top1(hwc36: np.ndarray, keep: np.ndarray) -> float:
            """The share of all digits classified right; those nvinfer skips (keep False) count as wrong."""
            if not keep.any():
                return 0.0
            key = hashlib.sha256(hwc36.tobytes() + keep.tobytes()).digest()
            if key not in seen:
                logits, _ = predict_all(run, normalize(hwc36[keep], pre["mean"], pre["std"]))
                seen[key] = float((logits.argmax(-1) == labels[keep]).sum() / len(labels))
            return seen[key]

        grey = [np.repeat(p[:, :, None], 3, axis=-1) for p in pixels]
        print(f"{len(labels)} test digits; model {onnx}; frame {FRAME_W}x{FRAME_H}; seed {args.seed}")
        print(f"reference (28x28 as stored, our antialiased resize to 36): top-1 "
              f"{top1(resize_images(grey, NET), np.ones(len(labels), bool)):.4f}")
        print(f"{'box':5s} {'size':>4s} {'jitter':>6s} {'<16px':>5s} " + " ".join(f"{r:>20s}" for r in RESIZES))
        for box in ("tile", "ink"):
            for size in sizes:
                for jitter in jitters:
                    cut = crops(pixels, size, box, jitter, seed=args.seed * 1000 + size)  # same places per box
                    keep = np.array([c is not None for c in cut])
                    blank = np.zeros((NET, NET), np.uint8)
                    row = []
                    for how in RESIZES:
                        small = np.stack([scale(c, how) if c is not None else blank for c in cut])
                        row.append(top1(np.repeat(small[..., None], 3, axis=-1), keep))
                    print(f"{box:5s} {size:4d} {jitter:6.1f} {int((~keep).sum()):5d} "
                          + " ".join(f"{t:20.4f}" for t in row), flush=True)
    print(f"{time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main()
