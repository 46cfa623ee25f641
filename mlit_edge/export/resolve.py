"""Resolve once, then run: a request (`ExportRequest` or `BuildRequest`) and its opened source become one
frozen `BuildPlan` that says everything the run will make and with what. Export and engine carry the plan
out; nothing below decides again which runtime, which flavour, which paths, whether torch is here or
whether to evaluate.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

from ..artifacts.input_convention import NORMALISED, PIXELS, UINT8
from ..artifacts.schema import check_runtime
from ..artifacts.targets import AUTO, FORMATS, TABLE, Target
from ..devices.mha_rules import pad_choice, parse_pad
from ..devices.profiles import (
    DeviceProfile,
    choose,
    named_profile,
    parses,
    profile_named,
)
from ..devices.trt_env import import_trt, jetson_tensorrt
from ..runtime.artifact import torch_available
from . import DEFAULT_OPSET, GROUPED, PRECISIONS, export_opset
from .calibration import Recipe, resolve_recipe
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

    runtime: str  # the graph the artifacts are made for (a target's `graph`: artifacts.targets)
    target: str  # the resolved --target, a row of artifacts.targets.TABLE
    frontend: str  # onnx, or a frontend row (torch-tensorrt) for a build that compiles the PyTorch model
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
    dla_int8: bool = False  # the DLA's calibrated INT8: the fp32 graph exported, the engine INT8 (engine/dla_int8.py)

    @property
    def strongly_typed(self) -> bool:
        """How the engine is built: strongly typed on TensorRT >= 10 and TensorRT-RTX (which has nothing else),
        weakly (builder flags, fp32 pins) for a TensorRT 8.x profile."""
        return TABLE[self.target].strongly_typed_only or self.device is None or self.device.strongly_typed

    @property
    def outputs(self) -> tuple[Path, ...]:
        """Every file the run writes (checked before any work: none replaces another source's artifact)."""
        fp32 = () if self.from_onnx else (self.fp32,)
        return (*fp32, *(v.path for v in self.variants), *((self.engine,) if self.engine else ()))


def resolve_target(target: str, frontend: str = "onnx") -> tuple[str, str | None]:
    """`auto` -> the first of `targets.AUTO` whose module imports: TensorRT where it imports, else ONNX Runtime
    (with the note that says so). A frontend row builds its `frontend_of` target only."""

    front = TABLE.get(frontend)
    if front is not None and front.frontend_of is not None:
        if target in ("auto", front.frontend_of):
            return front.frontend_of, None
        raise ValueError(f"--frontend {frontend} builds {TABLE[front.frontend_of].title} engines; it cannot target "
                         f"{target}")
    if target != "auto":
        return target, None
    for name in AUTO:
        try:
            if TABLE[name].module is not None:
                import_trt(name)
        except RuntimeError:
            continue
        skipped = AUTO[:AUTO.index(name)]
        return name, (None if not skipped else
                      f"note: {TABLE[skipped[0]].title} is not installed here, so the artifact is the ONNX for "
                      f"{TABLE[name].title} (build the {FORMATS[TABLE[skipped[0]].format].suffixes[0]} on the device: "
                      f"mlit-edge build --onnx ... --target {skipped[0]})")
    raise RuntimeError(f"--target auto: none of {', '.join(AUTO)} is installed here")


def resolve_plan(req: ExportOptions, source: Source, target: tuple[str, str | None] | None = None,
                 trt_version: str | None = None) -> BuildPlan:
    """The plan of `req` (an `ExportRequest` or a `BuildRequest`) from its opened `source`. `target`: a
    build's `resolve_target` answer, when the caller resolved it first (to fail before opening the source).
    `trt_version`: the TensorRT a build on this machine builds with (it decides the device profile)."""

    torch = torch_available()
    notes: list[str] = []
    dla_int8 = False
    if isinstance(req, BuildRequest):
        target, note = target or resolve_target(req.target, req.frontend)
        notes += [note] if note else []
        row, maker = TABLE[target], TABLE.get(req.frontend) or TABLE[target]
        runtime, builder = row.graph, maker.builder
        dla_int8 = req.dla_int8  # the export fp32, the engine INT8 (engine.dla refuses a target without it first)
        exported = "fp32" if dla_int8 else req.precision
        precisions, frontend, profile, probe = (exported,), req.frontend, req.profile, False
        base = fp32_base(flavour(exported, runtime))
        named = Path(req.out) / artifact_name(source.stem, "fp32", runtime=base.runtime)
        engine = (Path(req.out) / artifact_name(source.stem, req.precision, FORMATS[maker.format].suffixes[0])
                  if builder is not None else None)
    elif isinstance(req, ExportRequest):

        note, trt_version = None, trt_version or jetson_tensorrt()  # on a Jetson its TensorRT decides
        # an export makes the portable graph, for the first target `auto` takes
        row = TABLE[AUTO[0]]
        target, runtime, frontend, profile, engine, probe = row.name, row.graph, "onnx", None, None, req.probe
        precisions = ("fp32", *(p for p in PRECISIONS[1:] if p in req.precisions))
        base = flavour("fp32", runtime)
        named = (Path(req.out) / artifact_name(source.stem, "fp32", runtime=base.runtime) if req.out_folder
                 else Path(req.out))
    else:
        raise TypeError(f"not an export or build request: {type(req).__name__}")
    if source.onnx:  # an artifact made for one runtime is refused by another, in one line
        from ..artifacts.graph_scan import check_not_onnxruntime_only

        if source.record.runtime not in row.reads:
            check_runtime(source.record, runtime, source.onnx)
        if row.parser_graph:  # a foreign file without our sidecar can still be the ONNX Runtime flavour
            check_not_onnxruntime_only(source.onnx.read_bytes(), source.onnx)
    if source.onnx and source.precision not in ("fp32", *precisions):
        raise ValueError(f"--onnx {source.onnx} is {source.precision}; it can only be built as {source.precision} "
                         f"(or pass the fp32 ONNX to make a {precisions[-1]} one)")
    notes += [row.notes[p] for p in precisions if p in row.notes]
    # variants are named after the fp32 export of the output folder, even when made from a given ONNX
    # a flavour the export itself makes ("export": OpenVINO's precision is its IR's hint) is no variant file
    variants = tuple(VariantPlan(flavour(p, runtime), variant_path(named, p, runtime=runtime)) for p in precisions
                     if p != source.precision and flavour(p, runtime).maker != "export")
    int8 = [v for v in variants if v.flavour.maker.startswith("int8")]
    if int8 and not torch:  # both INT8 flavours calibrate
        raise RuntimeError("INT8 calibration reads a dataset, which needs torch: calibrate on the workstation "
                           "(mlit-edge build --precision int8 --target onnxruntime) and copy the INT8 ONNX here")
    device = _device(req, source, row, trt_version, notes)
    opset = export_opset(base.attention, req.opset or DEFAULT_OPSET)
    if device is not None and base.attention == GROUPED and opset > device.max_opset:
        if req.opset is not None:  # only the exporter's own opset (not given) is lowered for the parser
            device.refuse_opset(req.opset)
        opset = device.opset
    pad_to, pad_reason = _padding(req, source, runtime, device, precisions)
    dataset = source.record.dataset
    recipe = resolve_recipe(req.calib_data, req.calib_n, req.calib_seed, dataset) if int8 or dla_int8 else None
    return BuildPlan(runtime=runtime, target=target, frontend=frontend, folder=named.parent,
                     fp32=source.onnx or named, from_onnx=source.onnx is not None, attention=base.attention,
                     opset=opset, batch=req.batch, probe=probe, variants=variants, precisions=precisions,
                     engine=engine, dataset=dataset, recipe=recipe, evaluate=req.evaluate and torch, torch=torch,
                     profile=profile, notes=tuple(notes), target_note=note, device=device, pad_to=pad_to,
                     pad_reason=pad_reason, convention=_convention(req, source),
                     input_dtype=_input_dtype(req, source, device), dla_int8=dla_int8)


def _input_dtype(req: ExportOptions, source: Source, device: DeviceProfile | None) -> str:
    """The graph input's element type: a given ONNX keeps its own; an export's is --input-dtype, refused for a
    TensorRT without UINT8 network input (`devices.uint8_io`)."""

    if source.onnx is not None:
        return source.record.input_dtype
    if req.input_dtype == UINT8 and device is not None:
        from ..devices.uint8_io import uint8_input_allowed

        if not uint8_input_allowed(device.tensorrt):
            raise ValueError(f"--input-dtype uint8: {device.describe()} takes no UINT8 network input (TensorRT "
                             "8.5 and newer do); export the float32 pixels graph (--raw-input alone)")
    return req.input_dtype


def _convention(req: ExportOptions, source: Source) -> str:
    """The graph input's convention: a given ONNX keeps its own; an export takes pixels with --raw-input."""

    if source.onnx is not None:
        return source.record.input_convention
    return PIXELS if req.raw_input else NORMALISED


def _padding(req: ExportOptions, source: Source, runtime: str, device: DeviceProfile | None,
             precisions: tuple[str, ...]) -> tuple[int | None, str]:
    """The head size the fp32 export pads each head to, and why (`pad_choice`); a given ONNX keeps its own."""

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


def _device(req: ExportOptions, source: Source, row: Target, trt_version: str | None,
            notes: list[str]) -> DeviceProfile | None:
    """The device profile, chosen once: the flag's, or where a build runs this machine's TensorRT, the
    installed one's (a flag naming another is refused). A build from an ONNX made for a profile whose graph
    this TensorRT's parser cannot read is refused with the export that fixes it."""
    named = named_profile(req.jetpack, req.tensorrt)
    if not row.parser_graph:
        if named is not None:
            raise ValueError(f"--jetpack/--tensorrt name a TensorRT device; the {row.graph} artifact takes none "
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
