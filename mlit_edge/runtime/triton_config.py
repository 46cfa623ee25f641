"""Triton's `config.pbtxt` for one model: the text written with every string escaped as protobuf's text
format requires, then parsed back with Triton's own `ModelConfig` message (from tritonclient) and compared
with the config meant, before the caller publishes anything.

Names are escaped, not refused: Triton matches a config's tensor names to the model's byte for byte, and
ONNX names legitimately hold '.', ':', '/' and more (`input.1`, `/blocks.0/Add_output_0`), so a safe set
would turn valid models away. An escape that went wrong (or a name that slipped past it) would still be
caught by the parse-back: a config that does not parse, or parses into anything but what was meant (a
second input, a `parameters` block), is never written.
"""
from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

# TensorRT's dtype names (`engine.io`, as `trt.DataType`) and numpy's (an ONNX graph) to Triton's
TRITON_TYPES = {"float": "TYPE_FP32", "float32": "TYPE_FP32", "half": "TYPE_FP16", "float16": "TYPE_FP16",
                "bfloat16": "TYPE_BF16", "int64": "TYPE_INT64", "int32": "TYPE_INT32", "int8": "TYPE_INT8",
                "uint8": "TYPE_UINT8", "bool": "TYPE_BOOL"}
MAX_DIM = 2**31 - 1  # past this a classifier's dimension is a forged record, not a model (Triton's dims are int64)


@dataclass(frozen=True)
class Tensor:
    name: str
    dtype: str  # Triton's TYPE_*
    shape: tuple[int, ...]  # -1 where dynamic


def valid_dim(d) -> bool:
    """-1 (dynamic) or 1 to MAX_DIM, as an int (not a bool, a float or a string of digits)."""
    return isinstance(d, int) and not isinstance(d, bool) and (d == -1 or 1 <= d <= MAX_DIM)


def check_tensors(inputs: list[Tensor], outputs: list[Tensor], where: str) -> None:
    """What Triton needs of the tensors, refused in one line naming `where` (the artifact) otherwise."""
    for side, tensors in (("inputs", inputs), ("outputs", outputs)):
        if not tensors:
            raise ValueError(f"{where} has no {side}: Triton serves no such model")
    for t in (*inputs, *outputs):
        if not t.name:
            raise ValueError(f"{where}: a tensor has an empty name, which Triton cannot match to the model")
        try:
            t.name.encode("utf-8")
        except UnicodeEncodeError:
            raise ValueError(f"{where}: tensor name {t.name!r} is not valid Unicode") from None
        bad = [d for d in t.shape if not valid_dim(d)]
        if bad:
            raise ValueError(f"{where}: tensor {t.name!r} has dimension {bad[0]!r}, expected -1 (dynamic) or "
                             f"1 to {MAX_DIM}")


def quote(text: str) -> str:
    """`text` as a protobuf text-format string literal: '"' and '\\' backslash-escaped, and every byte of its
    UTF-8 outside printable ASCII as an octal escape (newlines and control bytes included), which both
    Triton's C++ parser and Python's read back as the same bytes."""
    out = []
    for byte in text.encode("utf-8"):
        char = chr(byte)
        out.append("\\" + char if char in '"\\' else char if 0x20 <= byte < 0x7F else f"\\{byte:03o}")
    return '"' + "".join(out) + '"'


def _dims(shape: tuple[int, ...]) -> str:
    return "[ " + ", ".join(str(d) for d in shape) + " ]"


LABELS = "labels.txt"  # beside config.pbtxt: Triton's classification extension reads it (label_filename)


PARAMETER = "mlit_edge_input"  # the config parameter that says what the input takes (input_convention.describe)


def model_config(name: str, platform: str, inputs: list[Tensor], outputs: list[Tensor], max_batch: int,
                 notes: tuple[str, ...] = (), labelled: str | None = None, feeds: str | None = None) -> str:
    """config.pbtxt in protobuf text format. `max_batch` 0: a static batch, dims include it. `notes`: comment
    lines on top (printable ASCII only, so that none can end its comment). `labelled`: the output whose class
    names are `LABELS` (`label_filename`), so that Triton's classification extension returns names. `feeds`: what
    the input takes, as the `PARAMETER` parameter (Triton passes `parameters` through to clients that read the
    config: `GET v2/models/NAME/config`), and the input's `format: FORMAT_NCHW` (an image input's layout)."""
    if not all(re.fullmatch(r"[ -~]*", note) for note in notes):
        raise ValueError("a config.pbtxt comment holds a byte outside printable ASCII; nothing was written")
    lines = [f"# {note}" for note in notes]
    lines += [f"name: {quote(name)}", f"platform: {quote(platform)}", f"max_batch_size: {max_batch}"]
    for section, tensors in (("input", inputs), ("output", outputs)):
        items = []
        for t in tensors:
            dims = t.shape[1:] if max_batch else t.shape
            label = f"\n    label_filename: {quote(LABELS)}" if section == "output" and t.name == labelled else ""
            label += "\n    format: FORMAT_NCHW" if section == "input" and feeds is not None else ""
            items.append(f"  {{\n    name: {quote(t.name)}\n    data_type: {t.dtype}\n    dims: {_dims(dims)}{label}\n  }}")
        lines.append(f"{section} [\n" + ",\n".join(items) + "\n]")
    if max_batch:
        lines.append("dynamic_batching { }")
    if feeds is not None:
        lines.append(f"parameters {{\n  key: {quote(PARAMETER)}\n  value {{ string_value: {quote(feeds)} }}\n}}")
    lines.append(f"instance_group [ {{ count: 1, kind: {_kind(platform)} }} ]")
    return "\n".join(lines) + "\n"


def _kind(platform: str) -> str:
    return "KIND_GPU" if platform == "tensorrt_plan" else "KIND_CPU"


@functools.lru_cache(maxsize=1)
def model_config_pb2() -> ModuleType:
    """Triton's ModelConfig message: tritonclient's generated module, loaded from its file so that the gRPC
    client (grpcio) is not needed; RuntimeError in one line where tritonclient or protobuf is missing."""
    import importlib.util

    try:
        import tritonclient
        from google.protobuf import text_format  # noqa: F401
    except ImportError:
        raise RuntimeError("export-triton checks config.pbtxt with Triton's own parser before writing it, which "
                           "needs tritonclient: pip install 'mlit-edge[triton]'") from None
    path = Path(tritonclient.__file__).parent / "grpc" / "model_config_pb2.py"
    try:
        spec = importlib.util.spec_from_file_location("model_config_pb2", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    except Exception as e:  # a tritonclient without it, or generated for another protobuf
        raise RuntimeError(f"cannot load Triton's ModelConfig from {path} ({type(e).__name__}: {e}); "
                           "pip install -U tritonclient protobuf") from None
    return module


def _meant(pb2: ModuleType, name: str, platform: str, inputs: list[Tensor], outputs: list[Tensor], max_batch: int,
           labelled: str | None = None, feeds: str | None = None):
    """The ModelConfig that `model_config` means, built field by field (no text involved)."""
    def dims(t: Tensor) -> list[int]:
        return list(t.shape[1:] if max_batch else t.shape)

    cfg = pb2.ModelConfig(name=name, platform=platform, max_batch_size=max_batch)
    for t in inputs:
        added = cfg.input.add(name=t.name, data_type=pb2.DataType.Value(t.dtype), dims=dims(t))
        if feeds is not None:
            added.format = pb2.ModelInput.Format.Value("FORMAT_NCHW")
    for t in outputs:
        out = cfg.output.add(name=t.name, data_type=pb2.DataType.Value(t.dtype), dims=dims(t))
        if t.name == labelled:
            out.label_filename = LABELS
    if max_batch:
        cfg.dynamic_batching.SetInParent()
    if feeds is not None:
        cfg.parameters[PARAMETER].string_value = feeds
    cfg.instance_group.add(count=1, kind=pb2.ModelInstanceGroup.Kind.Value(_kind(platform)))
    return cfg


def checked_config(name: str, platform: str, inputs: list[Tensor], outputs: list[Tensor], max_batch: int,
                   notes: tuple[str, ...] = (), labelled: str | None = None, feeds: str | None = None) -> str:
    """`model_config`'s text, once Triton's parser reads it back as exactly the config meant (name, platform,
    max_batch_size, every input and output with its type and dims, the labelled output, and nothing else);
    ValueError otherwise."""
    from google.protobuf import text_format

    pb2 = model_config_pb2()
    text = model_config(name, platform, inputs, outputs, max_batch, notes, labelled, feeds)
    try:
        parsed = text_format.Parse(text, pb2.ModelConfig())
    except text_format.ParseError as e:
        raise ValueError(f"the config.pbtxt made for {name!r} does not parse ({str(e).splitlines()[0][:200]}); "
                         "nothing was written") from None
    if parsed != _meant(pb2, name, platform, inputs, outputs, max_batch, labelled, feeds):
        raise ValueError(f"the config.pbtxt made for {name!r} does not parse back as the config meant (a tensor "
                         "name that escaped its string?); nothing was written")
    return text
