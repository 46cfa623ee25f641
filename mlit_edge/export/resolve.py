"""Resolve once, then run: a request (`ExportRequest` or `BuildRequest`) and its opened source become one
frozen `BuildPlan` that says everything the run will make and with what. Export and engine carry the plan
out; nothing below decides again which runtime, which flavour, which paths, whether torch is here or
whether to evaluate.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

from ..runtime.artifact import torch_available
from ..devices.profiles import DeviceProfile, choose, named_profile, parses, profile_named
from . import DEFAULT_OPSET, GROUPED, export_opset
from .calibration import Recipe
from .flavours import Flavour, artifact_name, flavour, fp32_base, variant_path
from .requests import BuildRequest, ExportOptions, ExportRequest
from .source import Source

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class VariantPlan:
    """One artifact the run makes from the fp32 export: its flavour and where it goes."""

    flavour: Flavour
    path: Path

    @property
    def precision(self) -> str:
        return self.flavour.precision


@dataclass(frozen=True)
class BuildPlan:
    """What one export or build makes, resolved from its request before any work."""

    runtime: str  # what the artifacts run on: "tensorrt" or "onnxruntime"
    target: str  # the resolved --target: tensorrt, tensorrt-rtx or onnxruntime
    frontend: str  # onnx, or torch-tensorrt for a build that compiles the PyTorch model
    folder: Path  # where everything is written
    fp32: Path  # the fp32 export the variants start from: written by the run, or the given ONNX
    from_onnx: bool  # the fp32 (or the final artifact) exists: a build from --onnx
    attention: str  # the fp32 export's attention form
    opset: int  # the fp32 export's effective opset (a fused form has its own)
    batch: int | None  # a fixed batch; None: dynamic
    probe: bool
    variants: tuple[VariantPlan, ...]  # made in order from the fp32 export; not the source's own precision
    precisions: tuple[str, ...]  # the artifacts the caller gets back, by precision
    engine: Path | None  # the .plan a build writes; None for an ONNX Runtime artifact
    dataset: str | None  # whose held-out split measures accuracy and parity
    recipe: Recipe | None  # the calibration set's, when an INT8 variant is made
    evaluate: bool  # measure top-1 of each artifact on the held-out split
    torch: bool  # torch is installed: datasets, checkpoints, parity and routing reports need it
    profile: tuple[int, int, int] | None  # a build's batch profile (MIN, OPT, MAX); None for an export
    notes: tuple[str, ...] = ()  # what the resolution decided that the user should hear
    target_note: str | None = None  # why `auto` chose what it chose
    device: DeviceProfile | None = None  # the TensorRT profile (devices.profiles); None for ONNX Runtime
    pad_to: int | None = None  # each head's Q, K and V zero-padded to this size in the fp32 export; None: not
    pad_reason: str = ""  # why (devices.mha_rules.pad_choice), for the sidecar
    convention: str = "normalised"  # the graph's input (artifacts.input_convention): "pixels" with --raw-input
    input_dtype: str = "float32"  # its element type: uint8 with --input-dtype uint8 (export.uint8_input)

    @property
    def strongly_typed(self) -> bool:
        """How the engine is built: strongly typed on TensorRT >= 10 and TensorRT-RTX (which has nothing else),
        weakly (builder flags, fp32 pins) for a TensorRT 8.x profile."""
        return self.target == "tensorrt-rtx" or self.device is None or self.device.strongly_typed

    @property
    def outputs(self) -> tuple[Path, ...]:
        """Every file the run writes (checked before any work: none replaces another source's artifact)."""
        fp32 = () if self.from_onnx else (self.fp32,)
        return (*fp32, *(v.path for v in self.variants), *((self.engine,) if self.engine else ()))


def resolve_target(target: str, frontend: str = "onnx") -> tuple[str, str | None]:
    """`auto` -> TensorRT where it imports, else ONNX Runtime (with the note that says so)."""
    from ..devices.trt_env import import_trt

    if frontend == "torch-tensorrt" and target in ("auto", "tensorrt"):
        return "tensorrt", None
    if frontend == "torch-tensorrt":
        raise ValueError(f"--frontend torch-tensorrt builds TensorRT engines; it cannot target {target}")
    if target != "auto":
        return target, None
    try:
        import_trt("tensorrt")
    except RuntimeError:
        return "onnxruntime", ("note: TensorRT is not installed here, so the artifact is the ONNX for ONNX Runtime "
                               "(build the .plan on the device: mlit-edge build --onnx ... --target tensorrt)")
    return "tensorrt", None


def resolve_plan(req: ExportOptions, source: Source, target: tuple[str, str | None] | None = None,
                 trt_version: str | None = None) -> BuildPlan:
    """The plan of `req` (an `ExportRequest` or a `BuildRequest`) from its opened `source`. `target`: a
    build's `resolve_target` answer, when the caller resolved it first (to fail before opening the source).
    `trt_version`: the TensorRT a build on this machine builds with (it decides the device profile)."""
    from .calibration import resolve_recipe

    torch = torch_available()
    notes: list[str] = []
    if isinstance(req, BuildRequest):
        target, note = target or resolve_target(req.target, req.frontend)
        notes += [note] if note else []
        runtime = "onnxruntime" if target == "onnxruntime" else "tensorrt"
        precisions, frontend, profile, probe = (req.precision,), req.frontend, req.profile, False
        base = fp32_base(flavour(req.precision, runtime))
        named = Path(req.out) / artifact_name(source.stem, "fp32", runtime=base.runtime)
        engine = Path(req.out) / artifact_name(source.stem, req.precision, ".plan") if runtime == "tensorrt" else None
    elif isinstance(req, ExportRequest):
        from ..devices.trt_env import jetson_tensorrt

        note, trt_version = None, trt_version or jetson_tensorrt()  # on a Jetson its TensorRT decides
        target, runtime, frontend, profile, engine, probe = "tensorrt", "tensorrt", "onnx", None, None, req.probe
        precisions = ("fp32", *(p for p in ("fp16", "int8") if p in req.precisions))
        base, named = flavour("fp32", "tensorrt"), Path(req.out)
    else:
        raise TypeError(f"not an export or build request: {type(req).__name__}")
    if source.onnx:  # an artifact made for one runtime is refused by another, in one line
        from ..artifacts.graph_scan import check_not_onnxruntime_only
        from ..artifacts.schema import check_runtime

        check_runtime(source.record, runtime, source.onnx)
        if runtime == "tensorrt":  # a foreign file without our sidecar can still be the ONNX Runtime flavour
            check_not_onnxruntime_only(source.onnx.read_bytes(), source.onnx)
    if source.onnx and source.precision not in ("fp32", *precisions):
        raise ValueError(f"--onnx {source.onnx} is {source.precision}; it can only be built as {source.precision} "
                         f"(or pass the fp32 ONNX to make a {precisions[-1]} one)")
    if runtime == "onnxruntime" and "fp16" in precisions:
        notes.append("note: fp16 is not a speed format on a CPU: ONNX Runtime runs it through inserted Casts, no "
                     "faster than fp32; it is built for TensorRT on the GPU (and to measure its accuracy here)")
    # variants are named after the fp32 export of the output folder, even when made from a given ONNX
    variants = tuple(VariantPlan(flavour(p, runtime), variant_path(named, p, runtime=runtime)) for p in precisions
                     if p != source.precision)
    int8 = [v for v in variants if v.flavour.maker.startswith("int8")]
    if any(v.flavour.maker == "int8-qdq" for v in int8) and not torch:
        raise RuntimeError("INT8 calibration reads a dataset, which needs torch: calibrate on the workstation "
                           "(mlit-edge build --precision int8 --target onnxruntime) and copy the INT8 ONNX here")
    device = _device(req, source, runtime, trt_version, notes)
    opset = export_opset(base.attention, req.opset or DEFAULT_OPSET)
    if device is not None and base.attention == GROUPED and opset > device.max_opset:
        if req.opset is not None:  # only the exporter's own opset (not given) is lowered for the parser
            raise ValueError(f"--opset {req.opset}: {device.describe()}; its parser reads opset {device.max_opset} "
                             "at most")
        opset = device.opset
    pad_to, pad_reason = _padding(req, source, runtime, device, precisions)
    dataset = source.record.dataset
    recipe = resolve_recipe(req.calib_data, req.calib_n, req.calib_seed, dataset) if int8 else None
    return BuildPlan(runtime, target, frontend, named.parent, source.onnx or named, source.onnx is not None,
                     base.attention, opset, req.batch, probe, variants, precisions, engine, dataset, recipe,
                     req.evaluate and torch, torch, profile, tuple(notes), note, device, pad_to, pad_reason,
                     _convention(req, source), _input_dtype(req, source, device))


def _input_dtype(req: ExportOptions, source: Source, device: DeviceProfile | None) -> str:
    """The graph input's element type: a given ONNX keeps its own; an export's is --input-dtype, refused for a
    TensorRT without UINT8 network input (`devices.uint8_io`)."""
    from ..artifacts.input_convention import UINT8, dtype_of

    if source.onnx is not None:
        return dtype_of(source.record)
    if req.input_dtype == UINT8 and device is not None:
        from ..devices.uint8_io import uint8_input_allowed

        if not uint8_input_allowed(device.tensorrt):
            raise ValueError(f"--input-dtype uint8: {device.describe()} takes no UINT8 network input (TensorRT "
                             "8.5 and newer do); export the float32 pixels graph (--raw-input alone)")
    return req.input_dtype


def _convention(req: ExportOptions, source: Source) -> str:
    """The graph input's convention: a given ONNX keeps its own; an export takes pixels with --raw-input."""
    from ..artifacts.input_convention import NORMALISED, PIXELS, convention_of

    if source.onnx is not None:
        return convention_of(source.record)
    return PIXELS if req.raw_input else NORMALISED


def _padding(req: ExportOptions, source: Source, runtime: str, device: DeviceProfile | None,
             precisions: tuple[str, ...]) -> tuple[int | None, str]:
    """The head size the fp32 export pads each head to, and why (`pad_choice`); a given ONNX keeps its own."""
    from ..devices.mha_rules import pad_choice, parse_pad

    if source.onnx is not None:
        if parse_pad(req.pad_heads) is not None:
            raise ValueError(f"--pad-heads {req.pad_heads} shapes an export from a checkpoint; {source.onnx.name} "
                             "already has its heads (export it again with --pad-heads)")
        return source.record.padded_to, ""
    cfg = source.model.cfg.__dict__ if source.model is not None else source.record.config
    if not cfg.get("dim") or not cfg.get("heads"):  # a plan made without a model (tests): nothing to pad
        return None, "the model's head size is not known"
    head = cfg["dim"] // cfg["heads"]
    return pad_choice(req.pad_heads, head, runtime, device.tensorrt if device else None, precisions)


def _device(req: ExportOptions, source: Source, runtime: str, trt_version: str | None,
            notes: list[str]) -> DeviceProfile | None:
    """The device profile, chosen once: the flag's, or where a build runs this machine's TensorRT, the
    installed one's (a flag naming another is refused). A build from an ONNX made for a profile whose graph
    this TensorRT's parser cannot read is refused with the export that fixes it."""
    named = named_profile(req.jetpack, req.tensorrt)
    if runtime != "tensorrt":
        if named is not None:
            raise ValueError(f"--jetpack/--tensorrt name a TensorRT device; the {runtime} artifact takes none "
                             "(drop the flag, or --target tensorrt)")
        return None
    device = choose(named, trt_version)
    if source.onnx is not None:
        made_for = profile_named(source.record.profile)
        if named is None and trt_version is None:  # no TensorRT here to decide: the ONNX's own profile
            device = made_for
        if not parses(made_for, device):
            raise ValueError(f"{source.onnx.name} was exported for {made_for.name} (opset {made_for.opset}, LayerNorm "
                             f"{made_for.layernorm}), which {device.name}'s TensorRT {device.tensorrt} cannot parse; "
                             f"export it for this device: mlit-edge export --checkpoint CKPT --jetpack "
                             f"{device.jetpack or '...'} (or build from the checkpoint here)")
        if made_for.name != device.name:
            notes.append(f"note: {source.onnx.name} was exported for {made_for.name}; {device.name}'s TensorRT "
                         f"{device.tensorrt} reads it (an older profile's graph is valid for a newer parser)")
    return device
