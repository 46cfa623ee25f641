"""The sidecar against the loaded model's own input and output: what predict checks before the first image, and
what Triton and DeepStream check against a graph's recorded IO (`stacks.graph_record`)."""
from __future__ import annotations

from pathlib import Path
from typing import Dict, Optional, Protocol, Sequence, Tuple

from .input_convention import PIXELS, UINT8, graph_convention
from .schema import MAX_STATIC_BATCH, ArtifactRecord
from .sidecar import SidecarError


class ModelIO(Protocol):
    """What `check_against_model` reads of a loaded model: a runtime's `Runner`, or a graph's recorded IO."""

    input_name: str
    input_names: Sequence[str]
    input_dtype: Optional[str]
    input_shape: Tuple
    output_shapes: Dict[str, Tuple]


def check_sidecar_input(record: ArtifactRecord, input_name: str | None, path: str | Path,
                        input_dtype: str | None = None) -> None:
    """Refuse a sidecar whose input convention contradicts the graph's own input name, or whose input dtype
    contradicts the graph's `input_dtype` (numpy's name; None: unknown): fed the wrong way, the model would
    classify every image wrongly without an error, or a client would be told to send the wrong bytes."""
    said, graph = record.input_convention, graph_convention(input_name)
    if graph is not None and graph != said:
        raise SidecarError(f"{Path(path).name}.json: input convention is {said!r}, but the graph's input "
                           f"{input_name!r} takes {graph} input; the sidecar does not belong to this graph: "
                           "rebuild the artifact with mlit-edge build")
    if input_dtype is not None and (input_dtype == UINT8) != (record.input_dtype == UINT8):
        raise SidecarError(f"{Path(path).name}.json: input dtype is {record.input_dtype}, but the graph's input "
                           f"{input_name!r} is {input_dtype}; the sidecar does not belong to this graph: "
                           "rebuild the artifact with mlit-edge build")


def describe(record: ArtifactRecord) -> str:
    """What a client must feed, in one line (Triton's config parameter, DeepStream's comment)."""
    pre = record.preprocess
    if record.input_convention == PIXELS:
        return (f"pixels: RGB 0-255 as {record.input_dtype} NCHW, resized only; the normalisation is inside the "
                "graph")
    return (f"normalised: RGB (pixel / 255 - mean) / std as float32 NCHW, mean {list(pre.mean) if pre else []}, "
            f"std {list(pre.std) if pre else []}")


def check_against_model(record: ArtifactRecord, runner: ModelIO, path: str | Path) -> None:
    """The sidecar's input size, input convention and class count against the loaded model's own."""
    where = f"{Path(path).name}.json"
    check_sidecar_input(record, runner.input_name if runner.input_names else None, path, runner.input_dtype)
    pre = record.preprocess
    size = pre.size if pre else None
    shape = runner.input_shape
    if size is not None and len(shape) == 4 and (shape[1] != 3 or tuple(shape[2:]) != (size, size)):
        raise SidecarError(f"{where}: preprocess.size is {size}, but the model's input is {shape[1]}x{shape[2]}x"
                           f"{shape[3]}; rebuild the artifact with mlit-edge")
    if len(shape) != 4:
        raise SidecarError(f"{where}: the model's input has {len(shape)} dimensions, expected 4 (N, 3, H, W): not an "
                           "mlit-edge classifier")
    if runner.input_dtype not in (None, "float32", "uint8"):  # uint8: a pixels graph's (checked just above)
        raise SidecarError(f"{Path(path).name}: the model's input is {runner.input_dtype}, expected float32 or uint8 "
                           "(N, 3, H, W): not an mlit-edge classifier")
    if shape and isinstance(shape[0], int) and not 1 <= shape[0] <= MAX_STATIC_BATCH:
        raise SidecarError(f"{where}: the model's input has a fixed batch of {shape[0]}, expected 1 to "
                           f"{MAX_STATIC_BATCH} (each call is padded to it); rebuild it with a smaller --batch")
    logits = runner.output_shapes.get("logits")
    if logits is None or len(logits) != 2:
        raise SidecarError(f"{where}: the model's output 'logits' is "
                           f"{'missing' if logits is None else f'of rank {len(logits)}'}, expected (N, classes): "
                           "not an mlit-edge classifier")
    classes = record.classes
    if classes is not None and logits and logits[-1] is not None and logits[-1] != len(classes):
        raise SidecarError(f"{where}: classes lists {len(classes)} names, but the model outputs {logits[-1]} "
                           "logits; rebuild the artifact with mlit-edge")
