"""The embedded runtime: classify images on the device with numpy and TensorRT (or ONNX Runtime).

No torch is imported, ever (a test proves it). `Classifier.load` reads the artifact's sidecar,
verifies the file's sha256 and, for a `.plan`, the local TensorRT version and GPU, and only then
loads it. `predict` applies exactly the eval preprocessing the sidecar records (antialiased resize
to 36, normalise) and returns class ids, names and probabilities.

    from mlit_edge.runtime import Classifier
    clf = Classifier.load("mlit-xxs-fp16.plan")      # or "mlit-xxs-fp32.onnx"
    for p in clf.predict(["cat.jpg", frame_uint8_hwc]):
        print(p.name, p.prob)
"""
from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Iterable, Sequence

import numpy as np

from .engine import PLAN_SUFFIXES
from .preprocess import normalize, resize_images
from .runners import predict_all
from .sidecar import read_sidecar


class InputError(ValueError):
    """Input the runtime will not classify: the message says what is wrong with it."""


@dataclass
class Prediction:
    class_id: int
    name: str
    prob: float
    top: list[tuple[int, str, float]]  # the k most probable classes, best first


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


def _check_array(a: np.ndarray, where: str) -> np.ndarray:
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


def _check_classifier_record(path: Path, record: dict) -> None:
    missing = [k for k in ("classes", "preprocess") if not record.get(k)]
    if missing or not {"mean", "std"} <= set(record.get("preprocess") or {}):
        raise ValueError(f"{path.name}.json lacks {missing or ['preprocess.mean/std']}: not an mlit-edge "
                         "classifier sidecar; rebuild the artifact with mlit-edge build")


class Classifier:
    """An mLiT artifact plus its recorded preprocessing and class names."""

    def __init__(self, runner, record: dict, path: Path, max_batch: int, fixed_batch: int | None) -> None:
        self.runner, self.record, self.path = runner, record, path
        self.max_batch, self.fixed_batch = max_batch, fixed_batch
        pre = record["preprocess"]
        self.size, self.mean, self.std = int(pre.get("size", 36)), pre["mean"], pre["std"]
        self.classes: list[str] = list(record["classes"])

    @classmethod
    def load(cls, path: str | Path, threads: int | None = None, cuda_graph: bool = True,
             ort_arena: bool = True) -> "Classifier":
        """Open a `.plan` (TensorRT) or `.onnx` (ONNX Runtime) after checking its sidecar.

        `ort_arena=False` turns ONNX Runtime's CPU memory arena off: large batches then give their memory
        back after each call, at some latency cost (README, "Bench").
        """
        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(f"{path} does not exist")
        suffix = path.suffix.lower()
        if suffix in PLAN_SUFFIXES:
            from .runners import TensorRTRunner

            runner = TensorRTRunner(path)
            # load_engine verifies the bytes it then deserializes (sha256, TensorRT version, GPU): one read
            runner.open()
            record = runner.record
            try:
                _check_classifier_record(path, record)
            except ValueError:
                runner.close()
                raise
            profile = (record.get("engine") or {}).get("flags", {}).get("profile", {})
            fixed = profile.get("static")
            runner.cuda_graph = cuda_graph and fixed is not None  # graphs need static shapes
            max_batch = fixed or int(profile.get("max", 1))
        elif suffix == ".onnx":
            from .runners import OnnxRuntimeRunner

            content = path.read_bytes()  # one read: the bytes hashed are the bytes loaded
            record = read_sidecar(path, content=content)  # FileNotFoundError without one, ValueError when tampered
            _check_classifier_record(path, record)
            fixed = record.get("batch") if isinstance(record.get("batch"), int) else None
            runner = OnnxRuntimeRunner(path, threads=threads, mem_arena=ort_arena, content=content)
            runner.open()
            max_batch = fixed or 64
        else:
            raise ValueError(f"{path}: expected a .plan or .onnx artifact")
        return cls(runner, record, path, max_batch, fixed)

    def close(self) -> None:
        self.runner.close()

    def __enter__(self) -> "Classifier":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- preprocessing -------------------------------------------------------------------------------

    def preprocess(self, images: Sequence | np.ndarray) -> np.ndarray:
        """uint8 HWC arrays of any size, or file paths -> float32 (N, 3, S, S), as recorded in the sidecar."""
        if isinstance(images, (str, Path)) or (isinstance(images, np.ndarray) and images.ndim in (2, 3)):
            images = [images]
        if isinstance(images, np.ndarray) and images.ndim == 4:
            if len(images) == 0:
                raise InputError("empty batch: nothing to classify")
            if images.dtype != np.uint8:
                _check_array(images, "images")  # raises with the dtype (or NaN) in the message
            _check_array(images[0], "images[0]")
            batch = resize_images(images, self.size)
        else:
            items = list(images)
            if not items:
                raise InputError("empty batch: nothing to classify")
            arrays = [load_image(x) if isinstance(x, (str, Path)) else _check_array(x, f"images[{i}]")
                      for i, x in enumerate(items)]
            batch = resize_images(arrays, self.size)
        return normalize(batch, self.mean, self.std)

    # -- inference -----------------------------------------------------------------------------------

    def logits(self, x: np.ndarray) -> np.ndarray:
        """Logits for an already preprocessed float32 (N, 3, S, S) batch, in chunks the artifact accepts."""
        if not isinstance(x, np.ndarray) or x.dtype != np.float32 or x.ndim != 4 or x.shape[1:] != (3, self.size,
                                                                                                     self.size):
            raise InputError(f"expected float32 (N, 3, {self.size}, {self.size}); got "
                             f"{getattr(x, 'dtype', type(x).__name__)} {getattr(x, 'shape', '')}")
        if len(x) == 0:
            raise InputError("empty batch: nothing to classify")
        if not np.isfinite(x).all():
            raise InputError("the input contains NaN or infinity")
        return predict_all(self.runner, x, self.max_batch, fixed=self.fixed_batch)[0]

    def predict(self, images: Sequence | np.ndarray, top_k: int = 1) -> list[Prediction]:
        """Classify uint8 images (arrays of any size) or image files."""
        logits = self.logits(self.preprocess(images)).astype(np.float64)
        z = logits - logits.max(axis=1, keepdims=True)
        probs = np.exp(z) / np.exp(z).sum(axis=1, keepdims=True)
        k = max(1, min(top_k, probs.shape[1]))
        order = np.argsort(-probs, axis=1)[:, :k]
        return [Prediction(int(o[0]), self._name(o[0]), float(p[o[0]]),
                           [(int(c), self._name(c), float(p[c])) for c in o]) for o, p in zip(order, probs)]

    def _name(self, c) -> str:
        return self.classes[int(c)] if int(c) < len(self.classes) else str(int(c))


def predict_files(model: str | Path, paths: Iterable[str | Path], top_k: int = 1) -> list[dict]:
    """One JSON-able result per file; a file that cannot be read gets an "error" and the rest go on."""
    out = []
    with Classifier.load(model) as clf:
        for p in paths:
            try:
                pred = clf.predict([p], top_k)[0]
                out.append({"path": str(p), **asdict(pred)})
            except InputError as e:
                out.append({"path": str(p), "error": str(e)})
    return out


def watch(model: str | Path, inbox: str | Path, results: str | Path, interval_s: float = 0.5,
          max_files: int | None = None) -> int:
    """A small always-on service: classify each new image in `inbox`, append a JSON line to `results`,
    and move the image to `inbox/done` (or `inbox/failed`). Returns the number handled (runs until
    killed unless `max_files` is given)."""
    inbox, results = Path(inbox), Path(results)
    done, failed = inbox / "done", inbox / "failed"
    for d in (done, failed):
        d.mkdir(parents=True, exist_ok=True)
    handled = 0
    with Classifier.load(model) as clf, open(results, "a", buffering=1) as log:
        while max_files is None or handled < max_files:
            files = sorted(p for p in inbox.iterdir() if p.is_file() and not p.name.startswith("."))
            if not files:
                time.sleep(interval_s)
                continue
            for f in files:
                try:
                    pred = clf.predict([f])[0]
                    row, dest = {"path": f.name, "class_id": pred.class_id, "name": pred.name, "prob": pred.prob}, done
                except InputError as e:
                    row, dest = {"path": f.name, "error": str(e)}, failed
                log.write(json.dumps({"time": time.strftime("%Y-%m-%dT%H:%M:%S%z"), **row}) + "\n")
                f.replace(dest / f.name)
                handled += 1
                if max_files is not None and handled >= max_files:
                    break
    return handled
