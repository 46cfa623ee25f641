"""A Triton Inference Server model repository for one artifact: `REPO/NAME/config.pbtxt`, the artifact as
`REPO/NAME/1/model.plan` (TensorRT) or `model.onnx` (ONNX Runtime), and its sidecar beside the config.

The config is written from the artifact itself: the platform from its format, the input and output names,
data types and dims from the engine's recorded I/O (a plan) or the graph (an ONNX), and `max_batch_size`
with dynamic batching where the batch dimension is dynamic (0 and full dims for a static batch, as
Triton's model configuration asks).
"""
from __future__ import annotations

import json
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

from .artifact import BATCH_PROFILE
from .schema import ArtifactRecord, classifier_fields
from .sidecar import atomic_path, read_sidecar

# TensorRT's dtype names (`engine.io`, as `trt.DataType`) and numpy's (an ONNX graph) to Triton's
TRITON_TYPES = {"float": "TYPE_FP32", "float32": "TYPE_FP32", "half": "TYPE_FP16", "float16": "TYPE_FP16",
                "bfloat16": "TYPE_BF16", "int64": "TYPE_INT64", "int32": "TYPE_INT32", "int8": "TYPE_INT8",
                "uint8": "TYPE_UINT8", "bool": "TYPE_BOOL"}
PLATFORMS = {".plan": ("tensorrt_plan", "model.plan"), ".onnx": ("onnxruntime_onnx", "model.onnx")}


@dataclass(frozen=True)
class Tensor:
    name: str
    dtype: str  # Triton's TYPE_*
    shape: tuple[int, ...]  # -1 where dynamic


def _triton_type(name: str, dtype: str, path: Path) -> str:
    if dtype not in TRITON_TYPES:
        raise ValueError(f"{path.name}: tensor {name!r} has type {dtype!r}, which Triton's config cannot name")
    return TRITON_TYPES[dtype]


def artifact_io(path: Path, record: dict) -> tuple[list[Tensor], list[Tensor]]:
    """The inputs and outputs of an artifact: from the engine's recorded I/O for a plan, from the graph for
    an ONNX (read without its weights)."""
    if path.suffix == ".plan":
        io = ArtifactRecord.of(record).engine_io
        if not io:
            raise ValueError(f"{path.name}.json records no engine I/O (a torch-tensorrt engine, or an old build); "
                             "rebuild it with mlit-edge build --frontend onnx")
        return tuple([Tensor(t["name"], _triton_type(t["name"], t["dtype"], path), tuple(int(d) for d in t["shape"]))
                      for t in io[side]] for side in ("inputs", "outputs"))
    import onnx
    from onnx.helper import tensor_dtype_to_np_dtype

    graph = onnx.load(str(path), load_external_data=False).graph
    weights = {t.name for t in graph.initializer}

    def tensors(values) -> list[Tensor]:
        out = []
        for v in values:
            if v.name in weights:
                continue
            t = v.type.tensor_type
            dims = tuple(d.dim_value if d.HasField("dim_value") else -1 for d in t.shape.dim)
            out.append(Tensor(v.name, _triton_type(v.name, str(tensor_dtype_to_np_dtype(t.elem_type)), path), dims))
        return out

    return tensors(graph.input), tensors(graph.output)


def _dims(shape: tuple[int, ...]) -> str:
    return "[ " + ", ".join(str(d) for d in shape) + " ]"


def model_config(name: str, platform: str, inputs: list[Tensor], outputs: list[Tensor], max_batch: int) -> str:
    """config.pbtxt in protobuf text format. `max_batch` 0: a static batch, dims include it."""
    lines = [f'name: "{name}"', f'platform: "{platform}"', f"max_batch_size: {max_batch}"]
    for section, tensors in (("input", inputs), ("output", outputs)):
        items = []
        for t in tensors:
            dims = t.shape[1:] if max_batch else t.shape
            items.append(f'  {{\n    name: "{t.name}"\n    data_type: {t.dtype}\n    dims: {_dims(dims)}\n  }}')
        lines.append(f"{section} [\n" + ",\n".join(items) + "\n]")
    if max_batch:
        lines.append("dynamic_batching { }")
    lines.append("instance_group [ { count: 1, kind: %s } ]" % ("KIND_GPU" if platform == "tensorrt_plan"
                                                               else "KIND_CPU"))
    return "\n".join(lines) + "\n"


def _max_batch(inputs: list[Tensor], record: dict) -> int:
    """0 for a static batch; otherwise the largest batch the artifact allows (a plan's profile maximum)."""
    if not inputs or inputs[0].shape[:1] != (-1,):
        return 0
    return int(ArtifactRecord.of(record).max_batch or BATCH_PROFILE[-1])


def write_repository(artifact: str | Path, repo: str | Path, name: str | None = None) -> Path:
    """Write the model folder for `artifact` into the repository `repo`; returns the model folder.

    Refuses an artifact that is not an mlit-edge classifier, a name Triton would not accept, and a model
    folder that already exists (Triton serves every folder it finds; replacing one is the user's call).
    """
    artifact = Path(artifact)
    if artifact.suffix not in PLATFORMS:
        raise ValueError(f"{artifact.name}: Triton serves .plan (TensorRT) and .onnx (ONNX Runtime) artifacts")
    if not artifact.is_file():
        raise FileNotFoundError(f"{artifact} does not exist")
    content = artifact.read_bytes()
    record = read_sidecar(artifact, content=content)  # these bytes' sha256 against the sidecar, or one line
    classifier_fields(record, artifact)
    name = name or re.sub(r"[^A-Za-z0-9_-]", "_", artifact.name.rsplit(".", 1)[0])
    if not re.fullmatch(r"[A-Za-z0-9_-]{1,128}", name):
        raise ValueError(f"--name {name!r}: use letters, digits, '_' and '-' (Triton's model names)")
    platform, file_name = PLATFORMS[artifact.suffix]
    inputs, outputs = artifact_io(artifact, record)
    folder = Path(repo) / name
    if folder.exists():
        raise FileExistsError(f"{folder} already exists; remove it or pass another --name")
    staging = Path(repo) / f".{name}.partial"
    shutil.rmtree(staging, ignore_errors=True)
    (staging / "1").mkdir(parents=True)
    try:
        (staging / "1" / file_name).write_bytes(content)  # the very bytes that were checked
        (staging / "config.pbtxt").write_text(model_config(name, platform, inputs, outputs, _max_batch(inputs, record)))
        with atomic_path(staging / "mlit-edge.json") as tmp:  # provenance: the sidecar, next to the config
            Path(tmp).write_text(json.dumps(record, indent=1) + "\n")
        staging.rename(folder)  # the model appears whole or not at all
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return folder
