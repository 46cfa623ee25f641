"""`Classifier`: an artifact, the preprocessing its sidecar records and its class names.

    from mlit_edge.runtime import Classifier
    with Classifier.load("mlit-xxs-fp16.plan") as clf:      # or "mlit-xxs-fp32.onnx"
        for p in clf.predict(["cat.jpg", frame_uint8_hwc]):
            print(p.name, p.prob)
        for p in clf.predict(source="clip.mp4", stream=True):   # a folder, a glob, a camera, a stream...
            print(p.to_json())

`Classifier.load` goes through `open_artifact`, which verifies the file's sha256 (and for a plan the
local TensorRT and GPU) on the very bytes it then loads. `predict` applies exactly the eval
preprocessing the sidecar records and returns `Prediction`s (runtime.prediction): class ids, names and
probabilities, where each image came from and the stage times of its chunk.
"""
from __future__ import annotations

import time
from pathlib import Path
from types import MappingProxyType
from typing import Any, Iterator, Sequence

import numpy as np

from .artifact import BATCH_PROFILE, RunnerOptions, artifact_format, open_artifact
from .images import DEFAULT_MAX_PIXELS, InputError, check_array, check_batch, load_image
from .inputs import Item, check_source, decode, escaping, is_live, iter_items
from .prediction import STAGES, Prediction, to_predictions
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
BATCH = Int(1, optional=True)

__all__ = ["Classifier", "Prediction"]  # Prediction lives in runtime.prediction; imported from here too


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
            batch = resize_images(check_batch(images, self.max_pixels), self.size)
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
    def predict(self, source: Any = None, top_k: int = 1, *, stream: bool = False,
                batch: int | None = None) -> list[Prediction] | Iterator[Prediction]:
        """Classify `source` (runtime.inputs: an image file, a folder, a glob, a video file, a camera or stream
        URI, uint8 arrays or an NxHxWxC batch, or a list of them) with the preprocessing the sidecar records, in
        chunks of the artifact's batch (`batch`: smaller ones), so memory follows the chunk and not the count of
        inputs (100,000 small arrays are fine). A list of `Prediction`s; with `stream=True` a generator that
        reads the source only as it is consumed (a camera or a stream, which never ends, needs it; its newest
        frame is classified alone)."""
        top_k = check_value(TOP_K, top_k, "--top-k")
        batch = check_value(BATCH, batch, "batch")
        check_value(Flag(), stream, "stream")
        self._require_open()
        check_source(source)
        live = is_live(source)
        if live and not stream:
            raise InputError(f"{source}: a camera or a stream never ends; use predict(source=..., stream=True) "
                             "and stop when you have enough")
        chunk = 1 if live else min(batch or self.max_batch, self.max_batch)
        results = escaping(self._predictions(source, top_k, chunk))
        return results if stream else list(results)

    def _predictions(self, source: Any, top_k: int, chunk: int) -> Iterator[Prediction]:
        items = iter_items(source, self.size, self.max_pixels)
        pending: list[Item] = []
        try:
            for item in items:
                pending.append(item)
                if len(pending) >= chunk:
                    done, pending = pending, []
                    yield from self._classify(done, top_k)
            if pending:
                yield from self._classify(pending, top_k)
        finally:
            items.close()  # a video's reader is released when the caller stops early

    def _classify(self, items: list[Item], top_k: int) -> list[Prediction]:
        """One chunk: decode, preprocess, infer, postprocess, each timed (runtime.prediction says how)."""
        t0 = time.perf_counter()
        if items[0].batch is not None:  # rows of one NxHxWxC array, in order: resized as one block
            images: Any = items[0].batch[items[0].row:items[-1].row + 1]
        else:
            images = [decode(it, self.max_pixels) for it in items]
        t1 = time.perf_counter()
        x = self.preprocess(images)
        t2 = time.perf_counter()
        logits = self.logits(x)
        t3 = time.perf_counter()
        preds = to_predictions(logits, self.classes, top_k, self.path.name, items[0].index)
        for it, p in zip(items, preds):
            p.path, p.frame, p.index, p.batch = it.path, it.frame, it.index, len(items)
        t4 = time.perf_counter()
        spent = (sum(it.decode_s for it in items) + t1 - t0, sum(it.resize_s for it in items) + t2 - t1, t3 - t2,
                 t4 - t3)
        times = MappingProxyType({stage: round(s * 1000, 4) for stage, s in zip(STAGES, spent)})
        for p in preds:
            p.times_ms = times  # one read-only mapping for the chunk: 100,000 predictions do not hold 100,000 dicts
        return preds

    def _require_open(self) -> None:
        if not self.runner.is_active:
            raise RuntimeError(f"this Classifier of {self.path.name} was closed; load it again with Classifier.load")
