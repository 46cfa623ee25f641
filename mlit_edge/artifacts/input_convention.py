"""What an artifact's graph input is: the one place the two input conventions are defined.

- "normalised" (every release before `--raw-input`): float32 (N, 3, S, S), (pixel / 255 - mean) / std per
  channel, input named `images`. Every client re-implements the normalisation (`preprocess.normalize`).
- "pixels" (`--raw-input`): float32 (N, 3, S, S) RGB pixels in [0, 255], input named `pixels`; the mean, std
  and 1/255 are folded into the patch embedding (`export.raw_input`), so a client only resizes. With
  `--input-dtype uint8` the input is uint8 and a Cast to float32 inside the graph reads it
  (`export.uint8_input`): a quarter of the bytes to copy, where the runtime takes uint8 network input.

The sidecar's `input` field records the convention, and the graph's input name carries it too, so a sidecar
that contradicts its graph is caught when the runner opens (`model_io.check_sidecar_input`), before a single wrong
class.
A sidecar made before the field existed is "normalised": that is what those graphs take.
"""
from __future__ import annotations

from typing import Any, Callable, Mapping, Sequence

import numpy as np

from .preprocess import normalize

NORMALISED, PIXELS = "normalised", "pixels"
CONVENTIONS = (NORMALISED, PIXELS)
FLOAT32, UINT8 = "float32", "uint8"
DTYPES = (FLOAT32, UINT8)  # a graph input's element type, as numpy names it; uint8 only for pixels
INPUT_NAMES = {NORMALISED: "images", PIXELS: "pixels"}  # the graph input's name under each convention
PIXEL_RANGE = (0.0, 255.0)


def check_dtype(convention: str, dtype: str) -> None:
    """ValueError unless `dtype` is one a graph of `convention` takes: uint8 carries pixels, never normalised
    values (which are fractions, most of them negative)."""
    if dtype not in DTYPES:
        raise ValueError(f"input dtype {dtype!r}: choose from {', '.join(DTYPES)}")
    if dtype == UINT8 and convention != PIXELS:
        raise ValueError("a uint8 input carries RGB pixels 0-255, not normalised values: add --raw-input")


def input_record(convention: str, mean: Sequence[float] | None, std: Sequence[float] | None,
                 dtype: str = FLOAT32) -> dict:
    """The sidecar's `input` field for a graph of `convention` and input `dtype` made from a model trained with
    `mean`, `std` (unknown, None, only for a normalised graph: the caller normalises as it knows)."""
    if convention not in CONVENTIONS:
        raise ValueError(f"input convention {convention!r}: choose from {', '.join(CONVENTIONS)}")
    check_dtype(convention, dtype)
    if convention == PIXELS and (mean is None or std is None):
        raise ValueError("a pixels graph folds the model's mean and std, and none are recorded")
    mean, std = list(mean or []), list(std or [])
    rec: dict[str, Any] = {"name": INPUT_NAMES[convention], "convention": convention, "dtype": dtype,
                           "layout": "NCHW", "channels": "RGB"}
    if convention == PIXELS:
        rec.update(range=list(PIXEL_RANGE), folded={"mean": [float(m) for m in mean], "std": [float(s) for s in std],
                                                   "scale": 1 / 255})
    else:
        rec.update(range=None, mean=[float(m) for m in mean], std=[float(s) for s in std])
    return rec


def field_convention(field: Any) -> str:
    """The convention a sidecar's `input` field records ("normalised" where it records none: the graphs made
    before it); `ArtifactRecord.input_convention` holds it."""
    conv = field.get("convention") if isinstance(field, Mapping) else None
    return conv if conv in CONVENTIONS else NORMALISED


def field_dtype(field: Any) -> str:
    """The input dtype a sidecar's `input` field records (float32 where it records none: every graph made before
    uint8 input); `ArtifactRecord.input_dtype` holds it."""
    dtype = field.get("dtype") if isinstance(field, Mapping) else None
    return dtype if dtype in DTYPES else FLOAT32


def check_input_field(field: Any, bad: Callable[[str, Any, str], Exception]) -> None:
    """The sidecar's `input` field, typed (`schema.check_record` calls it with its error maker)."""
    if not isinstance(field, Mapping) or field.get("convention") not in CONVENTIONS:
        raise bad("input", field, f"an object whose convention is one of {', '.join(CONVENTIONS)}")
    if field.get("name") != INPUT_NAMES[field["convention"]]:
        raise bad("input.name", field.get("name"), f"{INPUT_NAMES[field['convention']]!r} for {field['convention']} input")
    try:
        check_dtype(field["convention"], field.get("dtype", FLOAT32))
    except ValueError:
        raise bad("input.dtype", field.get("dtype"), "float32, or uint8 for pixels input") from None


def graph_convention(input_name: str | None) -> str | None:
    """The convention a graph's input name says (None: a name no mlit-edge export writes)."""
    for conv, name in INPUT_NAMES.items():
        if input_name == name:
            return conv
    return None


def model_input(images: np.ndarray, convention: str, mean: Sequence[float], std: Sequence[float],
                dtype: str = FLOAT32) -> np.ndarray:
    """Resized uint8 (N, S, S, 3) -> the graph's (N, 3, S, S) input under `convention`, as `dtype`."""
    if convention == PIXELS:
        return np.ascontiguousarray(images.transpose(0, 3, 1, 2), np.uint8 if dtype == UINT8 else np.float32)
    return normalize(images, mean, std)


def from_normalised(x: np.ndarray, convention: str, mean: Sequence[float], std: Sequence[float],
                    from_uint8: bool = False) -> np.ndarray:
    """A normalised float32 (N, 3, S, S) batch (a dataset's, as training keeps it) as the graph's input under
    `convention`: unchanged for "normalised"; for "pixels", (x * std + mean) * 255. `from_uint8`: the batch was
    normalised from uint8 images (every data set and decoded file here), so rounding gives back their pixels
    exactly (without it they come back within float32 rounding, about 3e-5 of a grey level)."""
    if convention != PIXELS:
        return x
    m = np.asarray(mean, np.float64).reshape(1, -1, 1, 1)
    s = np.asarray(std, np.float64).reshape(1, -1, 1, 1)
    p = (x.astype(np.float64) * s + m) * 255.0
    return np.ascontiguousarray((np.clip(np.rint(p), 0.0, 255.0) if from_uint8 else p).astype(np.float32))


def graph_feed(input_name: str, x: np.ndarray, mean: Sequence[float], std: Sequence[float],
               input_dtype: str | None = None) -> np.ndarray:
    """A normalised batch of decoded images as the input of the graph whose input is `input_name` and of
    `input_dtype` (numpy's name): the graph says its convention by its input's name and its type, so the caller
    cannot feed it the wrong one. uint8 pixels are exact: the rounding gives back the decoded values."""
    conv = graph_convention(input_name) or NORMALISED
    x = from_normalised(x, conv, mean, std, from_uint8=True)
    return x.astype(np.uint8) if conv == PIXELS and input_dtype == UINT8 else x


def onnx_dtype_name(elem_type: int) -> str:
    """An ONNX element type as numpy names it (float32, uint8, ...); a readable phrase for one numpy lacks."""
    from onnx.helper import tensor_dtype_to_np_dtype

    try:
        return str(tensor_dtype_to_np_dtype(elem_type))
    except (KeyError, ValueError, TypeError):  # undefined (0) or unknown to this onnx
        return f"ONNX element type {elem_type}"


def graph_input(proto: Any) -> tuple[str, str]:
    """An ONNX graph's first input: its name and element type as numpy names it (float32, uint8, ...); ValueError
    in one line for a graph without inputs (bytes a re-signed sidecar vouches for need not be a classifier)."""
    if not proto.graph.input:
        raise ValueError("the graph has no input, expected (N, 3, H, W) images: not an mlit-edge classifier")
    first = proto.graph.input[0]
    return first.name, onnx_dtype_name(first.type.tensor_type.elem_type)
