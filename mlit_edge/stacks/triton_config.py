"""Triton's `config.pbtxt` for one model: the text written with every string escaped as protobuf's text
format requires, then parsed back with Triton's own `ModelConfig` message (from tritonclient) and compared
with the config meant, before the caller publishes anything.

Names are escaped, not refused: Triton matches a config's tensor names to the model's byte for byte, and
ONNX names legitimately hold '.', ':', '/' and more (`input.1`, `/blocks.0/Add_output_0`), so a safe set
would turn valid models away. An escape that went wrong (or a name that slipped past it) would still be
caught by the parse-back: a config that does not parse, or parses into anything but what was meant (a
second input, a `parameters` block), is never written.

Where the model runs (`placement`): a plan on KIND_GPU; an ONNX on KIND_GPU with ONNX Runtime's TensorRT
accelerator, or on KIND_CPU as before. Triton's rules that its parser cannot see are replayed on every config
written (`triton_rules.check_config`).
"""
from __future__ import annotations

import functools
import hashlib
import importlib.util
import re
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

from ..artifacts.schema import ArtifactRecord
from ..artifacts.targets import parser_reads
from ..devices.plan_consumer import MAX_DIM, valid_dim  # Triton's dims are int64; past 2^31 - 1 a record is forged
from .triton_rules import ONNX, PLAN, PRECISION_MODES, check_config

# TensorRT's dtype names (`engine.io`, as `trt.DataType`) and numpy's (an ONNX graph) to Triton's
TRITON_TYPES = {"float": "TYPE_FP32", "float32": "TYPE_FP32", "half": "TYPE_FP16", "float16": "TYPE_FP16",
                "bfloat16": "TYPE_BF16", "int64": "TYPE_INT64", "int32": "TYPE_INT32", "int8": "TYPE_INT8",
                "uint8": "TYPE_UINT8", "bool": "TYPE_BOOL"}


@dataclass(frozen=True)
class Tensor:
    name: str
    dtype: str  # Triton's TYPE_*
    shape: tuple[int, ...]  # -1 where dynamic


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

KINDS = ("gpu", "cpu")  # export-triton --kind
# export-triton --engine-cache: a folder every user (Triton's too, in or out of a container) may write, which outlives
# a server restart; /tmp is cleared at boot and shared by all users, so a persistent, private one is the user's choice
DEFAULT_ENGINE_CACHE = "/tmp"


@dataclass(frozen=True)
class Placement:
    """Where Triton runs the model: the instance kind, and the `tensorrt` GPU accelerator's parameters (() for none)."""
    kind: str  # KIND_GPU or KIND_CPU
    tensorrt: tuple[tuple[str, str], ...] = ()


def engine_cache_path(root: str, name: str, content: bytes) -> str:
    """This artifact's engine folder under `root` on the serving machine, named after its sha256. ONNX Runtime's
    engine cache key hashes the model's file name (model.onnx in every Triton model), its tensor and node names and
    the OS, ORT, CUDA and TensorRT versions, not the weights (TRTGenerateId, microsoft/onnxruntime onnxruntime/core/
    providers/tensorrt/tensorrt_execution_provider_utils.h): retrained weights in a shared folder would load the old
    engine, which ONNX Runtime's TensorRT EP docs say to clean up by hand when the model changes. `root` must be
    absolute (GetCachePath, same file, joins a relative one to tritonserver's working directory) and exist (the EP
    makes the last folder alone: fs::create_directory, tensorrt_execution_provider.cc)."""
    if not root.startswith("/") or re.search(r"[\x00-\x1f\x7f]", root):
        raise ValueError(f"--engine-cache {root!r}: give an absolute folder on the serving machine, as tritonserver "
                         "sees it (ONNX Runtime reads a relative one from the server's working directory)")
    return f"{root.rstrip('/')}/mlit-edge-{name}-{hashlib.sha256(content).hexdigest()[:12]}"


def placement(platform: str, kind: str, record: ArtifactRecord, name: str, content: bytes, where: str,
              engine_cache: str | None = None) -> Placement:
    """Where `export-triton --kind KIND` runs the artifact (`where`: its file name, for the one-line refusals).

    A plan: KIND_GPU; `--kind cpu` is refused (Triton's TensorRT backend has GPU instances alone). An ONNX with
    `--kind cpu`: KIND_CPU, no accelerator (the config of old). An ONNX with `--kind gpu`: KIND_GPU and ONNX Runtime's
    `tensorrt` accelerator, its precision_mode the artifact's precision (triton_rules.PRECISION_MODES): an fp16 graph
    casts to fp16 itself, and FP16 lets TensorRT run those layers so; INT8 is TensorRT's Q/DQ recipe
    (precision.to_int8, runtime "tensorrt"), which the TensorRT EP builds as explicit quantization with INT8 on and
    no calibration table: it reads one only when named (microsoft/onnxruntime onnxruntime/core/providers/tensorrt/
    tensorrt_execution_provider.cc), and "If calibration table is provided for model with Q/DQ nodes then ORT
    session creation will fail" (onnxruntime_backend README.md, r25.12).

    An ONNX made for ONNX Runtime's own kernels (sidecar runtime "onnxruntime": the -ort opset 23 Attention, which
    the -int8-ort graph keeps between its MatMulIntegerToFloat matmuls) is refused for the GPU: TensorRT builds
    neither graph (onnx/onnx-tensorrt docs/operators.md, 8.5-GA, 10.0-GA and main: opsets up to 20), so
    ONNX Runtime would run them on CUDA or CPU kernels between TensorRT islands, a path nobody measured; they were
    made and measured for the CPU (export/flavours.py), where `--kind cpu` serves them."""
    if kind not in KINDS:
        raise ValueError(f"--kind {kind!r}: gpu or cpu")
    if engine_cache is not None and (platform != ONNX or kind != "gpu"):
        raise ValueError("--engine-cache is where ONNX Runtime's TensorRT accelerator keeps its engines: it goes with "
                         "an .onnx and --kind gpu" + (" (a plan is its engine already)" if platform == PLAN else ""))
    if platform == PLAN and kind == "cpu":
        raise ValueError(f"{where}: --kind cpu: a TensorRT plan runs only on the GPU (Triton's TensorRT backend has "
                         "GPU instances only); serve the .onnx with --kind cpu instead")
    if platform == PLAN or kind == "cpu":
        return Placement("KIND_GPU" if platform == PLAN else "KIND_CPU")
    if not parser_reads(record.runtime):
        raise ValueError(f"{where} was made for ONNX Runtime's CPU kernels (sidecar runtime \"onnxruntime\": integer "
                         "matmuls or opset 23 Attention, which TensorRT does not build): pass --kind cpu, or export-"
                         "triton the TensorRT graph of that precision (NAME-PRECISION.onnx, or its .plan) for the GPU")
    precision = record.precision
    if precision not in PRECISION_MODES:
        raise ValueError(f"{where}.json: precision {precision!r} is none of {', '.join(PRECISION_MODES)}")
    cache = engine_cache_path(DEFAULT_ENGINE_CACHE if engine_cache is None else engine_cache, name, content)
    return Placement("KIND_GPU", (("precision_mode", PRECISION_MODES[precision]), ("trt_engine_cache_enable", "1"),
                                  ("trt_engine_cache_path", cache)))


def _formatted(section: str, feeds: str | None, dims: tuple[int, ...]) -> bool:
    """Whether a tensor gets `format: FORMAT_NCHW`: an input that says what it takes, on the 3 dims an image format
    needs ("model input NHWC/NCHW require 3 dims", core src/model_config_utils.cc): not a static batch's 4."""
    return section == "input" and feeds is not None and len(dims) == 3


def model_config(name: str, platform: str, inputs: list[Tensor], outputs: list[Tensor], max_batch: int,
                 notes: tuple[str, ...] = (), labelled: str | None = None, feeds: str | None = None,
                 place: Placement | None = None) -> str:
    """config.pbtxt in protobuf text format. `max_batch` 0: a static batch, dims include it. `notes`: comment
    lines on top (printable ASCII only, so that none can end its comment). `labelled`: the output whose class
    names are `LABELS` (`label_filename`), so that Triton's classification extension returns names. `feeds`: what
    the input takes, as the `PARAMETER` parameter (Triton passes `parameters` through to clients that read the
    config: `GET v2/models/NAME/config`), and the input's `format: FORMAT_NCHW` (an image input's layout, where
    its dims are the 3 Triton asks of one). `place`: the instance kind and accelerator [default: a plan on the
    GPU, an ONNX on the CPU]."""
    place = place or Placement("KIND_GPU" if platform == PLAN else "KIND_CPU")
    if not all(re.fullmatch(r"[ -~]*", note) for note in notes):
        raise ValueError("a config.pbtxt comment holds a byte outside printable ASCII; nothing was written")
    lines = [f"# {note}" for note in notes]
    lines += [f"name: {quote(name)}", f"platform: {quote(platform)}", f"max_batch_size: {max_batch}"]
    for section, tensors in (("input", inputs), ("output", outputs)):
        items = []
        for t in tensors:
            dims = t.shape[1:] if max_batch else t.shape
            label = f"\n    label_filename: {quote(LABELS)}" if section == "output" and t.name == labelled else ""
            label += "\n    format: FORMAT_NCHW" if _formatted(section, feeds, dims) else ""
            items.append(f"  {{\n    name: {quote(t.name)}\n    data_type: {t.dtype}\n    dims: {_dims(dims)}{label}\n  }}")
        lines.append(f"{section} [\n" + ",\n".join(items) + "\n]")
    if max_batch:
        lines.append("dynamic_batching { }")
    if feeds is not None:
        lines.append(f"parameters {{\n  key: {quote(PARAMETER)}\n  value {{ string_value: {quote(feeds)} }}\n}}")
    lines.append(f"instance_group [ {{ count: 1, kind: {place.kind} }} ]")
    if place.tensorrt:  # the form of Triton's optimization.md, ONNX with TensorRT Optimization (ORT-TRT)
        params = "".join(f"\n      parameters {{ key: {quote(k)} value: {quote(v)} }}" for k, v in place.tensorrt)
        lines += ["optimization { execution_accelerators {", "  gpu_execution_accelerator [",
                  f'    {{\n      name: "tensorrt"{params}\n    }}', "  ]", "} }"]
    return "\n".join(lines) + "\n"


@functools.lru_cache(maxsize=1)
def model_config_pb2() -> ModuleType:
    """Triton's ModelConfig message: tritonclient's generated module, loaded from its file so that the gRPC
    client (grpcio) is not needed; RuntimeError in one line where tritonclient or protobuf is missing."""
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
           labelled: str | None = None, feeds: str | None = None, place: Placement | None = None):
    """The ModelConfig that `model_config` means, built field by field (no text involved)."""
    def dims(t: Tensor) -> list[int]:
        return list(t.shape[1:] if max_batch else t.shape)

    place = place or Placement("KIND_GPU" if platform == PLAN else "KIND_CPU")
    cfg = pb2.ModelConfig(name=name, platform=platform, max_batch_size=max_batch)
    for t in inputs:
        added = cfg.input.add(name=t.name, data_type=pb2.DataType.Value(t.dtype), dims=dims(t))
        if _formatted("input", feeds, tuple(dims(t))):
            added.format = pb2.ModelInput.Format.Value("FORMAT_NCHW")
    for t in outputs:
        out = cfg.output.add(name=t.name, data_type=pb2.DataType.Value(t.dtype), dims=dims(t))
        if t.name == labelled:
            out.label_filename = LABELS
    if max_batch:
        cfg.dynamic_batching.SetInParent()
    if feeds is not None:
        cfg.parameters[PARAMETER].string_value = feeds
    cfg.instance_group.add(count=1, kind=pb2.ModelInstanceGroup.Kind.Value(place.kind))
    if place.tensorrt:
        cfg.optimization.execution_accelerators.gpu_execution_accelerator.add(name="tensorrt",
                                                                              parameters=dict(place.tensorrt))
    return cfg


def checked_config(name: str, platform: str, inputs: list[Tensor], outputs: list[Tensor], max_batch: int,
                   notes: tuple[str, ...] = (), labelled: str | None = None, feeds: str | None = None,
                   place: Placement | None = None, profile_max: int | None = None) -> str:
    """`model_config`'s text, once Triton's parser reads it back as exactly the config meant (name, platform,
    max_batch_size, every input and output with its type and dims, the labelled output, the instance kind and
    accelerators, and nothing else) and `check_config` finds it keeps Triton's rules for this artifact
    (`profile_max`: a plan's batch profile maximum); ValueError otherwise."""
    from google.protobuf import text_format

    pb2 = model_config_pb2()
    text = model_config(name, platform, inputs, outputs, max_batch, notes, labelled, feeds, place)
    try:
        parsed = text_format.Parse(text, pb2.ModelConfig())
    except text_format.ParseError as e:
        raise ValueError(f"the config.pbtxt made for {name!r} does not parse ({str(e).splitlines()[0][:200]}); "
                         "nothing was written") from None
    if parsed != _meant(pb2, name, platform, inputs, outputs, max_batch, labelled, feeds, place):
        raise ValueError(f"the config.pbtxt made for {name!r} does not parse back as the config meant (a tensor "
                         "name that escaped its string?); nothing was written")
    check_config(parsed, inputs, outputs, profile_max)
    return text
