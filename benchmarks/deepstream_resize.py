"""How much DeepStream's resize can change the shipped model's answers: our resize (antialiased bilinear,
`artifacts/preprocess.py`) against OpenCV's nearest and bilinear (no antialiasing: what a plain GPU scaler does;
nvinfer's `scaling-filter` picks among such filters), on the whole mnist5k test split, in one run.

Two cases: the digits as stored (28 px, enlarged to 36: every filter sees the same pixels up close), and the
digits as a camera would frame them, enlarged to 224 px first (bilinear), then shrunk to 36 (where a filter
without antialiasing skips pixels). Top-1 of each, and the share of images whose class matches ours.

    python benchmarks/deepstream_resize.py [--onnx model.onnx]   # default: exports pretrained:xxs-mnist5k
"""
from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import numpy as np


def _classes(onnx: Path, hwc36: np.ndarray, mean, std) -> np.ndarray:
    from mlit_edge.artifacts.preprocess import normalize
    from mlit_edge.runtime.runners import OnnxRuntimeRunner, predict_all

    with OnnxRuntimeRunner(onnx) as run:
        logits, _ = predict_all(run, normalize(hwc36, mean, std))
    return logits.argmax(-1)


def main() -> None:
    import cv2

    from mlit_edge.artifacts.preprocess import resize_images
    from mlit_edge.train.data import mnist5k_raw

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--onnx", type=Path, default=None, help="an fp32 export of the shipped model")
    args = ap.parse_args()
    onnx = args.onnx
    if onnx is None:
        import mlit_edge

        out = str(Path(tempfile.mkdtemp()) / "m.onnx")
        onnx = mlit_edge.load("pretrained:xxs-mnist5k").export(out=out, precision="fp32").path
    mean, std = [0.1307] * 3, [0.3081] * 3
    pixels, labels = mnist5k_raw("test")  # uint8 (N, 28, 28), as the data set ships them
    grey = [np.repeat(p[:, :, None], 3, axis=-1) for p in pixels]
    cases = {"28 -> 36 (enlarged)": grey,
             "224 -> 36 (shrunk)": [cv2.resize(g, (224, 224), interpolation=cv2.INTER_LINEAR) for g in grey]}
    print(f"{len(labels)} test images; model {onnx}")
    print(f"{'case':22s} {'resize':22s} {'top-1':>7s} {'same class as ours':>19s}")
    for case, images in cases.items():
        ours = _classes(onnx, resize_images(images, 36), mean, std)
        print(f"{case:22s} {'ours (antialiased)':22s} {(ours == labels).mean():7.4f} {1.0:19.4f}")
        for name, flag in (("OpenCV nearest", cv2.INTER_NEAREST), ("OpenCV bilinear", cv2.INTER_LINEAR)):
            other = np.stack([cv2.resize(i, (36, 36), interpolation=flag) for i in images])
            got = _classes(onnx, other, mean, std)
            print(f"{case:22s} {name:22s} {(got == labels).mean():7.4f} {(got == ours).mean():19.4f}")


if __name__ == "__main__":
    main()
