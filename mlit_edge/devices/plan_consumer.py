"""Whether the program a `.plan` is handed to can deserialize it, read from the plan's sidecar before anything
is written (`export-deepstream`, `export-triton`); an ONNX is always accepted (the consumer builds it).

- A TensorRT-RTX plan is refused by both: TensorRT-RTX engines are deserialized by TensorRT-RTX's own
  runtime (`devices.trt_env.deserialize` opens a plan with the module that built it), and neither consumer
  links it: DeepStream's nvinfer links libnvinfer (DeepStream 6.2, sources/libs/nvdsinfer/Makefile:
  `-lnvinfer -lnvinfer_plugin -lnvonnxparser`), Triton's TensorRT backend too
  (triton-inference-server/tensorrt_backend CMakeLists.txt, commit 01ec6ba: `find_library(NVINFER_LIBRARY NAMES
  nvinfer)`).
- DeepStream here means a Jetson (the project's target): a plan built anywhere else (x86, no Jetson module) is
  refused, since an engine runs only on the GPU and TensorRT it was built with (`trt_env.check_compatible`).
  Triton runs on x86 and on Jetsons alike, so export-triton leaves the platform to `mlit-edge serve`-style
  checks on the device.
The refusal is one line with the command to run on the device.

What a plan takes and gives is read from its sidecar's `engine.io` (`engine_io`), never from the engine: every
field is checked there, once for both consumers, since a sidecar is a file anyone can edit.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, List, Tuple

from ..artifacts.schema import ArtifactRecord
from ..artifacts.targets import CONSUMERS, TABLE, of_module

JETSON_PLATFORM = "Linux aarch64"  # platform.system() and machine() on a Jetson, as trt_env.local_env records them


def build_command(record: ArtifactRecord, consumer: str = "triton") -> str:
    """The build to run on the device for a plan the consumer can load: from the plan's source ONNX, or for
    DeepStream from the probabilities copy export-deepstream makes of it (nvinfer reads probabilities)."""
    onnx = str(record.source_onnx or "X.onnx")
    if consumer == "deepstream" and not onnx.endswith("-probabilities.onnx"):
        onnx = f"{onnx[:-len('.onnx')] if onnx.endswith('.onnx') else onnx}-probabilities.onnx"
    target = next(t.name for t in TABLE.values() if consumer in t.consumers and t.frontend_of is None
                  and t.builder is not None)
    return f"mlit-edge build --onnx {onnx} --target {target} --precision {record.precision}"


def _fix(record: ArtifactRecord, consumer: str) -> str:
    if consumer != "deepstream":
        return f"on the device run {build_command(record)}"
    return (f"pass the ONNX ({record.source_onnx or 'X.onnx'}) to export-deepstream instead (nvinfer builds "
            "and caches the engine itself), or build the plan on the Jetson from the copy export-deepstream writes: "
            f"{build_command(record, consumer)}")


def check_plan_consumer(record: ArtifactRecord, path: str | Path, consumer: str) -> None:
    """ValueError (one line, with the build command) unless `consumer` ("deepstream" or "triton") can load the
    plan `path` whose sidecar is `record`."""
    if consumer not in CONSUMERS:
        raise ValueError(f"unknown consumer {consumer!r}: one of {', '.join(CONSUMERS)}")
    name = Path(path).name
    # the sidecar's target and the module that built the plan: either one naming a runtime the consumer lacks
    for made_by in (TABLE.get(str(record.target)), of_module(record.builder_module or "")):
        if made_by is not None and consumer not in made_by.consumers:
            raise ValueError(f"{name} is a {made_by.title} plan, and {CONSUMERS[consumer]} loads TensorRT plans "
                             f"only; {_fix(record, consumer)}")
    if consumer != "deepstream":
        return
    platform, module = record.device.get("platform"), record.device.get("module") or record.device.get("l4t")
    if platform != JETSON_PLATFORM or not module:
        built = f"on {platform}" if platform else "on a platform its sidecar does not record"
        raise ValueError(f"{name} was built {built}{'' if module else ', not on a Jetson'}, and DeepStream on a "
                         f"Jetson needs an engine built there: {_fix(record, consumer)}")


REBUILD = "rebuild it with mlit-edge build --frontend onnx"
MAX_DIM = 2**31 - 1  # past this a classifier's dimension is a forged record, not a model


@dataclass(frozen=True)
class PlanTensor:
    """One tensor of a plan's `engine.io`: its name, its type as TensorRT names it ('float', 'half', ...), its
    shape with -1 where dynamic."""

    name: str
    dtype: str
    shape: Tuple[int, ...]


def valid_dim(d: Any) -> bool:
    """-1 (dynamic) or 1 to MAX_DIM, as an int (not a bool, a float or a string of digits)."""
    return isinstance(d, int) and not isinstance(d, bool) and (d == -1 or 1 <= d <= MAX_DIM)


def _bad(path: Path, field: str, value: Any, want: str) -> ValueError:
    shown = repr(value)
    shown = shown if len(shown) <= 120 else shown[:120] + "..."
    return ValueError(f"{path.name}.json: {field} is {shown}, expected {want}; {REBUILD}")


def _tensor(path: Path, field: str, t: Any) -> PlanTensor:
    if not isinstance(t, dict):
        raise _bad(path, field, t, "an object with name, dtype and shape")
    name, dtype, shape = t.get("name"), t.get("dtype"), t.get("shape")
    if not isinstance(name, str) or not name:
        raise _bad(path, f"{field}.name", name, "the tensor's name")
    if not isinstance(dtype, str):
        raise _bad(path, f"{field}.dtype", dtype, "a TensorRT type name such as 'float'")
    if not isinstance(shape, list) or not all(valid_dim(d) for d in shape):
        raise _bad(path, f"{field}.shape", shape, f"a list of dims, each -1 (dynamic) or 1 to {MAX_DIM}")
    return PlanTensor(name, dtype, tuple(shape))


def engine_io(record: ArtifactRecord, path: str | Path) -> Tuple[List[PlanTensor], List[PlanTensor]]:
    """A plan's inputs and outputs as its sidecar's `engine.io` records them, every field checked (at least one
    of each); ValueError in one line naming the field otherwise."""
    path = Path(path)
    io = record.engine_io
    if io is None:
        raise ValueError(f"{path.name}.json records no engine I/O (a torch-tensorrt engine, or an old build); "
                         f"{REBUILD}")
    if not isinstance(io, dict):
        raise _bad(path, "engine.io", io, "an object with inputs and outputs")
    sides = []
    for side in ("inputs", "outputs"):
        if side not in io:
            raise ValueError(f"{path.name}.json: engine.io.{side} is missing; {REBUILD}")
        items = io[side]
        if not isinstance(items, list):
            raise _bad(path, f"engine.io.{side}", items, "a list of tensors")
        if not items:
            raise ValueError(f"{path.name}.json records no {side} in engine.io: not a classifier; {REBUILD}")
        sides.append([_tensor(path, f"engine.io.{side}[{i}]", t) for i, t in enumerate(items)])
    return sides[0], sides[1]


__all__ = ["CONSUMERS", "JETSON_PLATFORM", "build_command", "check_plan_consumer", "PlanTensor", "valid_dim",
           "engine_io"]
