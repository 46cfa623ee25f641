"""What an artifact's graph input is: the one place the two input conventions are defined.

- "normalised" (every release before `--raw-input`): float32 (N, 3, S, S), (pixel / 255 - mean) / std per
  channel, input named `images`. Every client re-implements the normalisation (`preprocess.normalize`).
- "pixels" (`--raw-input`): float32 (N, 3, S, S) RGB pixels in [0, 255], input named `pixels`; the mean, std
  and 1/255 are folded into the patch embedding (`export.raw_input`), so a client only resizes.

The sidecar's `input` field records the convention, and the graph's input name carries it too, so a sidecar
that contradicts its graph is caught when the runner opens (`check_graph`), before a single wrong class.
A sidecar made before the field existed is "normalised": that is what those graphs take.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

NORMALISED, PIXELS = "normalised", "pixels"
CONVENTIONS = (NORMALISED, PIXELS)
INPUT_NAMES = {NORMALISED: "images", PIXELS: "pixels"}  # the graph input's name under each convention
PIXEL_RANGE = (0.0, 255.0)


def input_record(convention: str, mean: Sequence[float], std: Sequence[float]) -> dict:
    """The sidecar's `input` field for a graph of `convention` made from a model trained with `mean`, `std`."""
    if convention not in CONVENTIONS:
        raise ValueError(f"input convention {convention!r}: choose from {', '.join(CONVENTIONS)}")
    rec: dict[str, Any] = {"name": INPUT_NAMES[convention], "convention": convention, "dtype": "float32",
                           "layout": "NCHW", "channels": "RGB"}
    if convention == PIXELS:
        rec.update(range=list(PIXEL_RANGE), folded={"mean": [float(m) for m in mean], "std": [float(s) for s in std],
                                                   "scale": 1 / 255})
    else:
        rec.update(range=None, mean=[float(m) for m in mean], std=[float(s) for s in std])
    return rec


def convention_of(record: Mapping[str, Any]) -> str:
    """The convention a sidecar records ("normalised" where it records none: the graphs made before it)."""
    field = record.get("input")
    conv = field.get("convention") if isinstance(field, Mapping) else None
    return conv if conv in CONVENTIONS else NORMALISED


def graph_convention(input_name: str | None) -> str | None:
    """The convention a graph's input name says (None: a name no mlit-edge export writes)."""
    for conv, name in INPUT_NAMES.items():
        if input_name == name:
            return conv
    return None


def check_graph(record: Mapping[str, Any], input_name: str | None, path: str | Path) -> None:
    """Refuse a sidecar whose input convention contradicts the graph's own input name: fed the wrong way,
    the model would classify every image wrongly without an error."""
    said, graph = convention_of(record), graph_convention(input_name)
    if graph is not None and graph != said:
        from .schema import SidecarError

        raise SidecarError(f"{Path(path).name}.json: input convention is {said!r}, but the graph's input "
                           f"{input_name!r} takes {graph} input; the sidecar does not belong to this graph: "
                           "rebuild the artifact with mlit-edge build")


def model_input(images: np.ndarray, convention: str, mean: Sequence[float], std: Sequence[float]) -> np.ndarray:
    """Resized uint8 (N, S, S, 3) -> the graph's float32 (N, 3, S, S) input under `convention`."""
    if convention == PIXELS:
        return np.ascontiguousarray(images.astype(np.float32).transpose(0, 3, 1, 2))
    from .preprocess import normalize

    return normalize(images, mean, std)


def from_normalised(x: np.ndarray, convention: str, mean: Sequence[float], std: Sequence[float]) -> np.ndarray:
    """A normalised float32 (N, 3, S, S) batch (a dataset's, as training keeps it) as the graph's input under
    `convention`: unchanged for "normalised"; for "pixels", x * std + mean, times 255. From uint8 images the
    result is their pixels to float32 rounding (about 3e-5 of a grey level)."""
    if convention != PIXELS:
        return x
    m = np.asarray(mean, np.float64).reshape(1, -1, 1, 1)
    s = np.asarray(std, np.float64).reshape(1, -1, 1, 1)
    return np.ascontiguousarray(((x.astype(np.float64) * s + m) * 255.0).astype(np.float32))


def feed_for(record: Mapping[str, Any], x: np.ndarray) -> np.ndarray:
    """`from_normalised` with the convention, mean and std a sidecar records."""
    conv = convention_of(record)
    if conv == NORMALISED:
        return x
    pre = record.get("preprocess") or {}
    return from_normalised(x, conv, pre["mean"], pre["std"])
