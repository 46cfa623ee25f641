"""Triton's rules that parsing a config.pbtxt with Triton's own ModelConfig message cannot see, replayed on every
config `export-triton` writes (`triton_config.checked_config`) before it is published.

Each rule is cited beside it, read on the r25.12 branch of the triton-inference-server repositories:
- DOC  server docs/user_guide/model_configuration.md (Maximum Batch Size, Inputs and Outputs, Instance Groups) and
  docs/user_guide/optimization.md (ONNX with TensorRT / OpenVINO Optimization);
- ORT  onnxruntime_backend src/onnxruntime.cc (the accelerators and their parameters), src/onnxruntime_utils.cc
  (CompareDimsSupported) and README.md (precision_mode);
- TRT  tensorrt_backend src/instance_state.cc, src/model_state.cc and src/tensorrt_utils.cc;
- core src/model_config_utils.cc, common protobuf/model_config.proto, backend src/backend_common.cc.
A rule marked [ours] is this project's: a config Triton loads but that does not do what it says.
`check_config` raises ValueError in one line naming the rule's source; a config that keeps them all passes.
"""
from __future__ import annotations

from typing import Any, Callable, Protocol, Sequence

from ..artifacts.targets import FORMATS

PLAN, ONNX = FORMATS["tensorrt"].triton, FORMATS["onnxruntime"].triton  # the platforms export-triton writes
# precision_mode: "Allowed values are "FP32", "FP16" and "INT8"" (ORT README.md, r25.12; BF16 came on main in 2026,
# in no release branch). The backend maps FP16 and INT8 to ONNX Runtime's trt_fp16_enable and trt_int8_enable
# (ORT src/onnxruntime.cc) and refuses any other ("unsupported precision mode").
PRECISION_MODES = {"fp32": "FP32", "fp16": "FP16", "int8": "INT8"}
# The `tensorrt` accelerator's parameters that every ONNX Runtime backend from r22.12 (the Tritons of JetPack 5) to
# r25.12 accepts: the backend fails the model's load on any it does not know ("unknown parameter '...' is provided
# for TensorRT Execution Accelerator", ORT src/onnxruntime.cc); r24.05 on take 26 more, which export-triton never
# writes and a JetPack 5 Triton would refuse.
TENSORRT_PARAMETERS = frozenset({"precision_mode", "max_workspace_size_bytes", "int8_calibration_table_name",
                                 "int8_use_native_calibration_table", "trt_engine_cache_enable",
                                 "trt_engine_cache_path"})
# those read by ParseBoolValue (ORT src/onnxruntime.cc), which takes BOOLS in any case and refuses anything else
# ("failed to convert '...' to boolean": backend src/backend_common.cc)
TENSORRT_BOOLS = frozenset({"int8_use_native_calibration_table", "trt_engine_cache_enable"})
BOOLS = ("true", "on", "1", "false", "off", "0")
# Accelerator names per platform and side. The ONNX Runtime backend knows "tensorrt" and, from r24.08, "cuda" among
# gpu_execution_accelerator and "openvino" among cpu_execution_accelerator, and fails the load on any other name
# ("unknown Execution Accelerator '...' is requested", ORT src/onnxruntime.cc; the names: backend
# include/triton/backend/backend_common.h kTensorRTExecutionAccelerator and the rest; DOC optimization.md).
# Execution accelerators are "Currently only recognized by ONNX Runtime backend and TensorFlow backend" (common
# protobuf/model_config.proto, ExecutionAccelerators): a plan takes none.
ACCELERATORS = {ONNX: {"gpu": frozenset({"tensorrt", "cuda"}), "cpu": frozenset({"openvino"})},
                PLAN: {"gpu": frozenset(), "cpu": frozenset()}}
# Instance kinds per platform: the TensorRT backend refuses every instance but a GPU one ("unable to load model ...,
# TensorRT backend supports only GPU device", TRT src/instance_state.cc); the ONNX Runtime backend runs KIND_CPU and
# KIND_GPU, and KIND_AUTO as a GPU instance where there is a GPU (ORT src/onnxruntime.cc; DOC, Instance Groups).
INSTANCE_KINDS = {PLAN: frozenset({"KIND_GPU"}), ONNX: frozenset({"KIND_GPU", "KIND_CPU", "KIND_AUTO"})}
IMAGE_FORMATS = ("FORMAT_NHWC", "FORMAT_NCHW")
DOC = "Triton server docs/user_guide/model_configuration.md"
ORT = "onnxruntime_backend src/onnxruntime.cc"


class TensorLike(Protocol):
    """A model tensor as `triton_config.Tensor` holds it: its name, Triton's TYPE_*, and its full shape."""
    name: str
    dtype: str
    shape: tuple[int, ...]


def _enum(message: Any, field: str) -> str:
    """The name of an enum field's value, read from the message's own descriptor (so any loaded copy of Triton's
    model_config_pb2, the tests' too, is read the same)."""
    number = getattr(message, field)
    value = message.DESCRIPTOR.fields_by_name[field].enum_type.values_by_number.get(number)
    return value.name if value is not None else str(number)


def check_config(cfg: Any, inputs: Sequence[TensorLike], outputs: Sequence[TensorLike],
                 profile_max: int | None = None) -> None:
    """Triton's rules on the parsed `cfg` (a ModelConfig) against the artifact it serves: `inputs` and `outputs` are
    the model's tensors (full shapes, batch first), `profile_max` a plan's batch profile maximum (None: unknown)."""
    def refuse(rule: str, source: str) -> None:
        raise ValueError(f"config.pbtxt for {cfg.name[:80]!r}: {rule} ({source}); nothing was written")

    platform, mbs = cfg.platform, cfg.max_batch_size
    if platform not in INSTANCE_KINDS:
        refuse(f"platform {platform[:80]!r} is neither {PLAN} nor {ONNX}", "the platforms export-triton writes")
    # "If the model's batch dimension is the first dimension, and all inputs and outputs to the model have this batch
    # dimension ... max_batch_size should be set to a value greater-or-equal-to 1 ... For models that do not support
    # batching ... max_batch_size must be set to zero" (DOC, Maximum Batch Size); both backends refuse
    # max_batch_size > 0 where the model's first dimension is not -1 (ORT src/onnxruntime_utils.cc and TRT
    # src/tensorrt_utils.cc, CompareDimsSupported): a static-batch graph takes 0 and its full dims
    fixed = next((t for t in (*inputs, *outputs) if mbs > 0 and tuple(t.shape[:1]) != (-1,)), None)
    if fixed is not None:
        refuse(f"max_batch_size {mbs}, but {fixed.name[:80]!r} has the fixed batch {list(fixed.shape[:1])}: a "
               "static-batch graph takes max_batch_size 0 and its full dims", f"{DOC}, Maximum Batch Size")
    # a plan serves no batch past its profile's maximum ("configuration specified max-batch ... but TensorRT engine
    # only supports max-batch ...", TRT src/model_state.cc)
    if platform == PLAN and profile_max is not None and mbs > profile_max:
        refuse(f"max_batch_size {mbs} exceeds the plan's batch profile maximum {profile_max}",
               "tensorrt_backend src/model_state.cc")
    for section, ios, tensors in (("input", cfg.input, inputs), ("output", cfg.output, outputs)):
        _check_tensors(section, ios, {t.name: t for t in tensors}, mbs, refuse)
    kinds = [_enum(g, "kind") for g in cfg.instance_group]
    for kind in (k for k in kinds if k not in INSTANCE_KINDS[platform]):
        refuse(f"{platform} with {kind}: " + ("a TensorRT plan runs only on the GPU" if platform == PLAN else
                                              f"its kinds are {', '.join(sorted(INSTANCE_KINDS[platform]))}"),
               f"{DOC}, Instance Groups; tensorrt_backend src/instance_state.cc")
    side = cfg.optimization.execution_accelerators
    for on, entries in (("gpu", side.gpu_execution_accelerator), ("cpu", side.cpu_execution_accelerator)):
        names = [a.name for a in entries]
        for a in entries:
            if a.name not in ACCELERATORS[platform][on]:
                refuse(f"{on}_execution_accelerator {a.name[:80]!r} is unknown to {platform} (it takes "
                       f"{', '.join(sorted(ACCELERATORS[platform][on])) or 'none'})",
                       "Triton server docs/user_guide/optimization.md; onnxruntime_backend README.md and "
                       "src/onnxruntime.cc; common protobuf/model_config.proto")
            # the backend leaves a provider named twice to ONNX Runtime, which refuses it ("Don't need to ensure
            # uniqueness of the providers, ONNX Runtime will check it", ORT src/onnxruntime.cc)
            if names.count(a.name) > 1:
                refuse(f"{on}_execution_accelerator {a.name!r} is named twice", ORT)
            if a.name == "tensorrt":
                _check_tensorrt(dict(a.parameters), refuse)
    # [ours] the backend appends GPU accelerators for KIND_GPU and KIND_AUTO instances only (ORT src/onnxruntime.cc):
    # with KIND_CPU instances alone the config names TensorRT and nothing uses it
    if len(side.gpu_execution_accelerator) and kinds and set(kinds) == {"KIND_CPU"}:
        refuse("a gpu_execution_accelerator with KIND_CPU instances only is never used", ORT)


def _check_tensors(section: str, ios: Any, model: dict, mbs: int, refuse: Callable[[str, str], None]) -> None:
    """Each config input or output (`ios`) against the model's tensor of its name (`model`).

    "The name specified for an input or output tensor must match the name expected by the model ... For models with
    max_batch_size greater-than 0, the full shape is formed as [ -1 ] + dims. For models with max_batch_size equal to
    0, the full shape is formed as dims" (DOC, Inputs and Outputs); both backends compare that full shape with the
    model's, each dimension the model fixes exactly (CompareDimsSupported, as above), and its data type."""
    where = f"{DOC}, Inputs and Outputs"
    for io in ios:
        t, dims, what = model.get(io.name), list(io.dims), f"{section} {io.name[:80]!r}"
        if t is None:
            refuse(f"{what} is none of the model's {section}s", where)
        full = [-1, *dims] if mbs > 0 else dims
        if len(full) != len(t.shape) or any(m not in (-1, c) for m, c in zip(t.shape, full)):
            why = (": the dims include the batch dimension, which max_batch_size > 0 puts in front"
                   if mbs > 0 and len(dims) == len(t.shape) else "")
            refuse(f"{what} has dims {dims}, full shape {full}; the model's is {list(t.shape)}{why}", where)
        if _enum(io, "data_type") != t.dtype:
            refuse(f"{what} is {_enum(io, 'data_type')}, the model's {t.dtype}", where)
        # "model input NHWC/NCHW require 3 dims" (core src/model_config_utils.cc, ValidateModelInput)
        if section == "input" and _enum(io, "format") in IMAGE_FORMATS and len(dims) != 3:
            refuse(f"{what} is {_enum(io, 'format')} on dims {dims}: an image format needs 3",
                   "Triton core src/model_config_utils.cc")


def _check_tensorrt(params: dict, refuse: Callable[[str, str], None]) -> None:
    """The `tensorrt` accelerator's parameters (`params`, key to value) as the ONNX Runtime backend reads them."""
    for key, value in params.items():
        if key not in TENSORRT_PARAMETERS:
            refuse(f"tensorrt accelerator parameter {key[:80]!r} is not one every ONNX Runtime backend takes "
                   f"({', '.join(sorted(TENSORRT_PARAMETERS))})", ORT)
        if key in TENSORRT_BOOLS and value.lower() not in BOOLS:
            refuse(f"{key} is {value[:80]!r}, not a boolean ({', '.join(BOOLS)})", "backend src/backend_common.cc")
    if params.get("precision_mode", "FP32") not in PRECISION_MODES.values():
        refuse(f"precision_mode {params['precision_mode'][:80]!r}: the ONNX Runtime backend takes "
               f"{', '.join(PRECISION_MODES.values())}", "onnxruntime_backend README.md")
    # [ours] ONNX Runtime joins a relative cache path to tritonserver's working directory (GetCachePath,
    # microsoft/onnxruntime onnxruntime/core/providers/tensorrt/tensorrt_execution_provider_utils.h), not the model's
    if not params.get("trt_engine_cache_path", "/").startswith("/"):
        refuse(f"trt_engine_cache_path {params['trt_engine_cache_path'][:80]!r} is relative: ONNX Runtime would "
               "read it from tritonserver's working directory",
               "microsoft/onnxruntime tensorrt_execution_provider_utils.h")
