"""`Classifier`: an artifact, the preprocessing its sidecar records and its class names.

    from mlit_edge.runtime import Classifier
    with Classifier.load("mlit-xxs-fp16.plan") as clf:      # or "mlit-xxs-fp32.onnx"
        for p in clf.predict(["cat.jpg", frame_uint8_hwc]):
            print(p.name, p.prob)

`Classifier.load` goes through `open_artifact`, which verifies the file's sha256 (and for a plan the
local TensorRT and GPU) on the very bytes it then loads. `predict` applies exactly the eval
preprocessing the sidecar records and returns class ids, names and probabilities.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np

from .artifact import BATCH_PROFILE, RunnerOptions, artifact_format, open_artifact
from .images import DEFAULT_MAX_PIXELS, InputError, check_array, load_image
from ..base.messages import escaped, require_file
from ..artifacts.input_convention import model_input
from ..artifacts.preprocess import resize_images
from .runners import Runner, predict_all
from ..artifacts.model_io import check_against_model
from ..artifacts.schema import ArtifactRecord, classifier_fields
from ..base.values import Flag, Int, PathArg, check_value, max_threads

# the rules of the arguments the CLI's predict, serve and bench take too (same bounds, same words: base.values)
THREADS = Int(1, max_threads, optional=True)  # past 8 per core the OpenMP runtime may fail to start them: a SIGSEGV
MAX_PIXELS = Int(1, optional=True)  # None: no limit
TOP_K = Int(1)


@dataclass
class Prediction:
    class_id: int
    name: str
    prob: float
    top: list[tuple[int, str, float]]  # the k most probable classes, best first


class Classifier:
    """An mLiT artifact plus its recorded preprocessing and class names."""

    def __init__(self, runner: Runner, record: ArtifactRecord, path: Path,
                 max_pixels: int | None = DEFAULT_MAX_PIXELS) -> None:
        if record.preprocess is None or record.classes is None:  # what `classifier_fields` refuses in `load`
            raise ValueError(f"{Path(path).name}.json records no preprocess or classes: not a classifier's sidecar")
        self.runner, self.record, self.path, self.max_pixels = runner, record, path, max_pixels
        pre = record.preprocess
        self.size, self.mean, self.std = pre.size, list(pre.mean), list(pre.std)
        self.convention = record.input_convention  # normalised, or pixels for a --raw-input graph
        self.input_dtype = record.input_dtype  # float32, or uint8 (--input-dtype uint8): checked against the graph
        self.classes: list[str] = list(record.classes)
        self.max_batch = runner.static_batch or int(record.max_batch or BATCH_PROFILE[-1])

    @classmethod
    @escaped
    def load(cls, path: str | Path, threads: int | None = None, cuda_graph: bool = True,
             ort_arena: bool = True, max_pixels: int | None = DEFAULT_MAX_PIXELS, force: bool = False) -> "Classifier":
        """Open a `.plan` (TensorRT) or `.onnx` (ONNX Runtime) after checking its sidecar: its sha256, its
        fields, and that they agree with the model's own input and output shapes.

        `ort_arena=False` turns ONNX Runtime's CPU memory arena off: large batches then give their memory
        back after each call, at some latency cost (docs/bench.md). `max_pixels` (None: no limit)
        refuses larger images, per file, before they are decoded. `force` runs a plan built on another Jetson
        module of the same GPU (AGX Orin against Orin Nano), with a warning.
        """
        path = require_file(check_value(PathArg(), path, "--model"))
        threads = check_value(THREADS, threads, "--threads")
        max_pixels = check_value(MAX_PIXELS, max_pixels, "--max-pixels")
        for name, flag in (("cuda_graph", cuda_graph), ("ort_arena", ort_arena), ("force", force)):
            check_value(Flag(), flag, name)
        if artifact_format(path).name == "torch":
            raise ValueError(f"{path}: the runtime runs .plan and .onnx artifacts; build one with mlit-edge build")
        # the device loop keeps memory down: ONNX Runtime's memory pattern costs ~95 MB and no speed here
        runner, record = open_artifact(path, RunnerOptions(threads=threads, ort_arena=ort_arena,
                                                           ort_mem_pattern=False, cuda_graph=cuda_graph,
                                                           force_device=force))
        classifier_fields(record, path)
        runner.open()
        try:
            check_against_model(record, runner, path)
        except ValueError:
            runner.close()
            raise
        return cls(runner, record, path, max_pixels)

    def close(self) -> None:
        self.runner.close()

    def __enter__(self) -> "Classifier":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- preprocessing -------------------------------------------------------------------------------

    def preprocess(self, images: Sequence | np.ndarray) -> np.ndarray:
        """uint8 HWC arrays of any size, or file paths -> float32 (N, 3, S, S), as recorded in the sidecar: resized,
        then normalised, or for a --raw-input graph the resized pixels as they are."""
        if isinstance(images, (str, Path)) or (isinstance(images, np.ndarray) and images.ndim in (2, 3)):
            images = [images]
        if isinstance(images, np.ndarray) and images.ndim == 4:
            if len(images) == 0:
                raise InputError("empty batch: nothing to classify")
            if images.dtype != np.uint8:
                check_array(images, "images")  # raises with the dtype (or NaN) in the message
            check_array(images[0], "images[0]", self.max_pixels)
            batch = resize_images(images, self.size)
        else:
            items = list(images)
            if not items:
                raise InputError("empty batch: nothing to classify")
            arrays = [load_image(x, self.max_pixels, keep_grey=True) if isinstance(x, (str, Path))
                      else check_array(x, f"images[{i}]", self.max_pixels) for i, x in enumerate(items)]
            batch = resize_images(arrays, self.size)
        return model_input(batch, self.convention, self.mean, self.std, self.input_dtype)

    # -- inference -----------------------------------------------------------------------------------

    def logits(self, x: np.ndarray) -> np.ndarray:
        """Logits for an already preprocessed (N, 3, S, S) batch (`preprocess`'s: float32, or uint8 for a uint8
        graph), in chunks the artifact accepts."""
        want = np.dtype(self.input_dtype)
        if not isinstance(x, np.ndarray) or x.dtype != want or x.ndim != 4 or x.shape[1:] != (3, self.size,
                                                                                               self.size):
            raise InputError(f"expected {want.name} (N, 3, {self.size}, {self.size}); got "
                             f"{getattr(x, 'dtype', type(x).__name__)} {getattr(x, 'shape', '')}")
        if len(x) == 0:
            raise InputError("empty batch: nothing to classify")
        self._require_open()
        if want.kind == "f" and not np.isfinite(x).all():
            raise InputError("the input contains NaN or infinity")
        return predict_all(self.runner, x, self.max_batch)[0]

    @escaped
    def predict(self, images: Sequence | np.ndarray, top_k: int = 1) -> list[Prediction]:
        """Classify uint8 images (arrays of any size) or image files, in chunks of the artifact's batch, so
        memory follows the chunk and not the count of inputs (100,000 small arrays are fine)."""
        top_k = check_value(TOP_K, top_k, "--top-k")
        self._require_open()
        if isinstance(images, (str, Path)) or (isinstance(images, np.ndarray) and images.ndim in (2, 3)):
            images = [images]
        if not isinstance(images, np.ndarray):
            images = list(images)
        if len(images) == 0:
            raise InputError("empty batch: nothing to classify")
        out: list[Prediction] = []
        for start in range(0, len(images), self.max_batch):
            out += self._predict_chunk(images[start:start + self.max_batch], top_k, start)
        return out

    def _predict_chunk(self, images: Sequence | np.ndarray, top_k: int, first: int) -> list[Prediction]:
        logits = self.logits(self.preprocess(images)).astype(np.float64)
        if logits.ndim != 2 or logits.shape[1] != len(self.classes):
            raise ValueError(f"{self.path.name}: the model outputs logits of shape {logits.shape[1:]}, but its sidecar "
                             f"names {len(self.classes)} classes; rebuild the artifact with mlit-edge")
        finite = np.isfinite(logits).all(axis=1)
        if not finite.all():  # a class picked from NaN would be noise presented as an answer
            raise InputError(f"images[{first + int(np.argmin(finite))}]: the model's logits are NaN or infinite "
                             "(a broken artifact, or an input it cannot handle)")
        z = logits - logits.max(axis=1, keepdims=True)
        probs = np.exp(z) / np.exp(z).sum(axis=1, keepdims=True)
        k = max(1, min(top_k, probs.shape[1]))
        order = np.argsort(-probs, axis=1)[:, :k]
        return [Prediction(int(o[0]), self._name(o[0]), float(p[o[0]]),
                           [(int(c), self._name(c), float(p[c])) for c in o]) for o, p in zip(order, probs)]

    def _require_open(self) -> None:
        if not self.runner.is_active:
            raise RuntimeError(f"this Classifier of {self.path.name} was closed; load it again with Classifier.load")

    def _name(self, c) -> str:
        return self.classes[int(c)] if int(c) < len(self.classes) else str(int(c))
