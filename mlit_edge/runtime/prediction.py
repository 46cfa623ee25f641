"""What a classification is: `Prediction`, and `to_predictions`, which turns a chunk's logits into them.

A prediction keeps the fields it always had (`class_id`, `name`, `prob`, `top`: the top-k asked for) and adds
the five most probable classes (`top5`), every class's probability (`probs`, an array, not serialised), where
the image came from (`path`: the file, or the video, camera or stream URI of a frame; `frame`: the frame's
index there; `index`: its place in the order of the source) and the stage times of its chunk.

**Times.** Images are classified in chunks (the artifact's batch, or `batch=`). `times_ms` holds the wall time
of each stage for the whole chunk the image was in, in ms: `decode` (reading files, or the video frames read
for the chunk), `preprocess` (resize and normalise; for video the resize done as each frame is read),
`inference` (the model) and `postprocess` (softmax, top-k, these objects); `batch` is that chunk's size, so one
image's share is `times_ms[stage] / batch`. The chunk's total is not split, since the stages are not per image.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import numpy as np

from .images import InputError

STAGES = ("decode", "preprocess", "inference", "postprocess")
# to_dict's keys, in order: the path first and the four that `mlit-edge predict --json` always printed, unchanged
KEYS = ("path", "frame", "index", "class_id", "name", "prob", "top", "top5", "times_ms", "batch")


def _top(rows: Any) -> list:
    return [(int(c), str(n), float(p)) for c, n, p in rows]


@dataclass
class Prediction:
    """One image's classification (the module docstring says what each field holds). `top5` is made from `probs`
    when it is first read: 100,000 predictions held in a list then cost what the old four fields did, near."""

    class_id: int
    name: str
    prob: float
    top: list[tuple[int, str, float]]  # the k most probable classes asked for, best first
    path: str | None = None  # the image file, or the video / camera / stream the frame came from; None for arrays
    frame: int | None = None  # the frame's index in its video or stream; None for an image
    index: int | None = None  # its place in the source's order (a folder sorted, a list as given)
    times_ms: Mapping[str, float] = field(default_factory=dict)  # each stage's time for the whole chunk (read-only,
    # shared by the chunk's predictions)
    batch: int = 1  # the size of that chunk
    probs: np.ndarray | None = field(default=None, repr=False, compare=False)  # every class's probability
    classes: Sequence[str] | None = field(default=None, repr=False, compare=False)  # names for `top5` (shared)
    _top5: list[tuple[int, str, float]] | None = field(default=None, repr=False, compare=False)

    @property
    def top5(self) -> list[tuple[int, str, float]]:
        """The five most probable classes (all of them when there are fewer), best first."""
        if self._top5 is None:
            if self.probs is None or self.classes is None:
                return list(self.top[:5])
            order = np.argsort(-self.probs, kind="stable")[:5]
            self._top5 = [(int(c), str(self.classes[c]), float(self.probs[c])) for c in order]
        return self._top5

    def to_dict(self) -> dict[str, Any]:
        """A JSON-able dict: every field but `probs` (the `mlit-edge predict --json` objects)."""
        out: dict[str, Any] = {}
        for name in KEYS:
            value = getattr(self, name)
            out[name] = [list(t) for t in value] if name in ("top", "top5") else (
                dict(value) if name == "times_ms" else value)
        return out

    def to_json(self, **kw: Any) -> str:
        """`to_dict()` as JSON (`json.dumps` keywords pass through: `indent=1`)."""
        return json.dumps(self.to_dict(), **kw)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "Prediction":
        """The prediction `to_dict` (or a parsed `to_json`) describes; `probs` is not kept there, so it is None."""
        unknown = sorted(set(d) - set(KEYS))
        if unknown:
            raise ValueError(f"not a prediction's dict: unknown key {', '.join(map(repr, unknown))}")
        kw = {k: v for k, v in d.items() if k != "top5"}
        kw["top"] = _top(kw.get("top", ()))
        return cls(**kw, _top5=_top(d["top5"]) if "top5" in d else None)


def softmax(logits: np.ndarray) -> np.ndarray:
    """Row-wise probabilities of (N, C) float64 logits, stable for large ones."""
    z = np.exp(logits - logits.max(axis=1, keepdims=True))
    return z / z.sum(axis=1, keepdims=True)


def to_predictions(logits: np.ndarray, classes: Sequence[str], top_k: int, where: str,
                   first: int = 0) -> list[Prediction]:
    """(N, C) logits of one chunk -> its predictions (their source and times are the caller's to set). `where`
    names the model in the errors, `first` the chunk's first image's index."""
    logits = np.asarray(logits, np.float64)
    if logits.ndim != 2 or logits.shape[1] != len(classes):
        raise ValueError(f"{where}: the model outputs logits of shape {logits.shape[1:]}, but its sidecar "
                         f"names {len(classes)} classes; rebuild the artifact with mlit-edge")
    finite = np.isfinite(logits).all(axis=1)
    if not finite.all():  # a class picked from NaN would be noise presented as an answer
        raise InputError(f"images[{first + int(np.argmin(finite))}]: the model's logits are NaN or infinite "
                         "(a broken artifact, or an input it cannot handle)")
    probs = softmax(logits)
    order = np.argsort(-probs, axis=1, kind="stable")[:, :max(1, min(top_k, probs.shape[1]))]
    out = []
    for o, p in zip(order, probs):
        top = [(int(c), str(classes[c]), float(p[c])) for c in o]
        out.append(Prediction(top[0][0], top[0][1], top[0][2], top, probs=p, classes=classes))
    return out
