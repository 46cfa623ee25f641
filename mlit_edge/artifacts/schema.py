"""What a classifier artifact's sidecar must say, checked before its numbers are used.

A sidecar whose sha256 still matches can have been edited by hand. Every field the runtime acts on
is checked against a schema (types and ranges) and, once the model is loaded, against the model's
own input and output shapes; a failure is one line that names the field.
"""
from __future__ import annotations

import copy
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any, Mapping

from .input_convention import FLOAT32, NORMALISED, check_input_field, field_convention, field_dtype
from .sidecar import SidecarError, read_sidecar
from .targets import GRAPHS, PRECISIONS
from ..base.values import check_threads

MAX_SIZE = 4096  # [ours] an input side beyond this is no mLiT (36 px) and would only exhaust memory
MAX_STATIC_BATCH = 4096  # [ours] a fixed batch beyond this is padded per call: 10^6 took 14.5 GiB for one image
MAX_HEAD = 256  # [ours] a head size, padded or not, beyond the largest any fused attention takes is no mLiT's
RUNTIMES = ("any", *GRAPHS)  # what an artifact's graph was made for (artifacts.targets: the graph each target reads)


def _obj(value: Any) -> Mapping:
    return value if isinstance(value, Mapping) else {}


def _items(value: Any) -> tuple:
    return tuple(value) if isinstance(value, (list, tuple)) else ()


@dataclass(frozen=True)
class Preprocess:
    """How an image becomes the model's input: resize to `size`, then (pixel / 255 - mean) / std."""

    size: int
    mean: tuple[float, ...]
    std: tuple[float, ...]
    dataset: str | None = None  # what the model was trained on: its held-out split measures accuracy


@dataclass(frozen=True)
class ArtifactRecord:
    """An artifact's sidecar, typed: the fields the stages act on, read once from the JSON (`from_json`), read as
    attributes everywhere else. Only this module looks into the JSON: `raw` keeps it as on disk, for `to_json` and
    `derive`. `check_record` validates the types first (`read_record`); a record made in memory is taken as is."""

    raw: Mapping[str, Any] = field(default_factory=dict, repr=False)
    precision: str = "fp32"
    runtime: str = "any"
    classes: tuple[str, ...] | None = None
    preprocess: Preprocess | None = None
    size: str | None = None  # model.size: a registered size, SIZE-custom or custom
    config: Mapping[str, Any] = field(default_factory=dict, repr=False)  # model.config, the MLiTConfig's fields
    checkpoint: str | None = None
    checkpoint_sha256: str | None = None
    random_weights: bool = False
    artifact: str | None = None  # the artifact's file name, as published
    sha256: str | None = None  # of the artifact itself, as published
    mlit_edge_version: str | None = None  # the mlit-edge that published it
    nbytes: int | None = None  # its size ("bytes")
    kind: str | None = None  # "tensorrt-engine" for a plan
    target: str | None = None  # the build target that made a plan (export.TARGETS); None: not recorded
    source_onnx: str | None = None  # the ONNX a plan or a derived graph was made from
    source_onnx_sha256: str | None = None
    batch: int | str | None = None  # "dynamic" or the fixed batch
    opset: int | None = None
    probe: bool | None = None
    attention: str = "grouped"  # the attention form (export.ATTENTION_FORMS)
    attention_op: str | None = None
    head_size: int | None = None  # attention.head_size: the model's own
    padded_to: int | None = None  # attention.padded_to: each head's Q, K and V zero-padded to it; None: not padded
    input_convention: str = NORMALISED  # input.convention: normalised, or pixels for a --raw-input graph
    input_dtype: str = FLOAT32  # input.dtype: float32, or uint8 (--input-dtype uint8)
    output_kind: str | None = None  # output.kind: "probabilities" for a graph ending in a Softmax
    ort_session: Mapping[str, Any] = field(default_factory=dict)  # ONNX Runtime session options
    ort_requires: str | None = None  # the oldest ONNX Runtime that runs the graph
    parity_max_abs_err: float | None = None
    top1: float | None = None  # accuracy.top1 on the held-out split
    batch_profile: Mapping[str, Any] | None = None  # engine.flags.profile: a plan's min, opt and max batch
    min_batch: int | None = None  # engine.flags.profile.min: equal to max_batch for a static --batch N build
    max_batch: int | None = None  # engine.flags.profile.max of a dynamic-batch plan
    engine_io: Any = None  # engine.io as recorded: devices.plan_consumer.engine_io checks and types it
    calibration_sha256: str | None = None  # the INT8 calibration manifest's
    profile: str | None = None  # the device profile's name (devices.profiles); None: made before profiles
    profile_field: Any = None  # the profile object as recorded: devices.profiles.recorded_profile checks it
    fp32_layers: tuple[str, ...] = ()  # the ONNX nodes that compute in fp32 in a reduced-precision graph
    builder_module: str | None = None  # a plan's engine.builder: the TensorRT module and version that built it
    builder_version: str | None = None
    device: Mapping[str, Any] = field(default_factory=dict)  # a plan's engine.device (devices.trt_env.DeviceEnv)
    dla_core: int | None = None  # a plan's engine.dla_core: the DLA core it was built for; None: the GPU
    ov_precision: Any = None  # an OpenVINO IR's openvino.inference_precision (runtime.ov_runner checks it)
    ov_weights_sha256: Any = None  # openvino.weights_sha256: the IR's .bin

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "ArtifactRecord":
        """The typed view of a sidecar's JSON object (a nested object that is none reads as empty)."""
        get = data.get
        model, att, ort = _obj(get("model")), _obj(get("attention")), _obj(get("onnxruntime"))
        engine, pre, classes = _obj(get("engine")), get("preprocess"), get("classes")
        ov = _obj(get("openvino"))
        profile, builder = _obj(_obj(engine.get("flags")).get("profile")), _obj(engine.get("builder"))
        return cls(
            raw=MappingProxyType(dict(data)), precision=get("precision", "fp32"), runtime=get("runtime", "any"),
            classes=_items(classes) if isinstance(classes, (list, tuple)) else None,
            preprocess=Preprocess(size=pre["size"], mean=_items(pre.get("mean")), std=_items(pre.get("std")),
                                  dataset=pre.get("dataset")) if isinstance(pre, Mapping) and "size" in pre else None,
            size=model.get("size"), config=_obj(model.get("config")), checkpoint=get("checkpoint"),
            checkpoint_sha256=get("checkpoint_sha256"), random_weights=bool(get("random_weights")),
            artifact=get("artifact"), sha256=get("sha256"), mlit_edge_version=get("mlit_edge_version"),
            nbytes=get("bytes"), kind=get("kind"), target=get("target"),
            source_onnx=get("source_onnx"), source_onnx_sha256=get("source_onnx_sha256"), batch=get("batch"),
            opset=get("opset"), probe=get("probe"), attention=att.get("form", "grouped"), attention_op=att.get("op"),
            head_size=att.get("head_size"), padded_to=att.get("padded_to"),
            input_convention=field_convention(get("input")), input_dtype=field_dtype(get("input")),
            output_kind=_obj(get("output")).get("kind"), ort_session=_obj(ort.get("session")),
            ort_requires=ort.get("requires"), parity_max_abs_err=_obj(get("parity")).get("max_abs_err"),
            top1=_obj(get("accuracy")).get("top1"), batch_profile=profile or None, min_batch=profile.get("min"),
            max_batch=profile.get("max"), engine_io=engine.get("io"),
            # an INT8 ONNX records its manifest under "calibration"; a plan, its own (or its source's) at the top
            calibration_sha256=get("calibration_sha256") or _obj(get("calibration")).get("manifest_sha256"),
            profile=_obj(get("profile")).get("name"), profile_field=get("profile"),
            fp32_layers=_items(get("fp32_layers")), builder_module=builder.get("module"),
            builder_version=builder.get("version"), device=_obj(engine.get("device")), dla_core=engine.get("dla_core"),
            ov_precision=ov.get("inference_precision"), ov_weights_sha256=ov.get("weights_sha256"))

    @property
    def dataset(self) -> str | None:
        return self.preprocess.dataset if self.preprocess else None

    @property
    def empty(self) -> bool:
        """Whether no sidecar stands behind it (an ONNX without one, which bench opens all the same)."""
        return not self.raw

    def to_json(self) -> dict:
        """The JSON record, as a new dict (to write, or to derive a record from this one)."""
        return copy.deepcopy(dict(self.raw))

    def derive(self, **fields: Any) -> "ArtifactRecord":
        """This record with top-level JSON `fields` set (a checked file's sha256, a served output)."""
        return ArtifactRecord.from_json({**self.to_json(), **fields})


def read_record(artifact: str | Path, content: bytes | None = None) -> ArtifactRecord:
    """An artifact's sidecar read, checked against the artifact's bytes (sha256) and validated
    (`check_record`), once: the typed record every stage then uses."""
    record = recorded(artifact, content)
    check_record(record.raw, artifact)
    return record


def recorded(artifact: str | Path, content: bytes | None = None, verify_hash: bool = True) -> ArtifactRecord:
    """An artifact's sidecar, typed, its fields not yet checked (the caller checks them in its own order:
    `classifier_fields` names what is missing first). `verify_hash=False`: its sha256 not checked either, for
    what only reports or guesses from it (a check's notes, a default, an overwrite's warning)."""
    return ArtifactRecord.from_json(read_sidecar(artifact, verify_hash=verify_hash, content=content))


def _count(value, top: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= top


def _numbers(value, n: int) -> bool:
    return (isinstance(value, list) and len(value) == n
            and all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in value))


def check_record(data: Mapping[str, Any], path: str | Path, where: str | None = None,
                 hint: str = "rebuild the artifact with mlit-edge") -> None:
    """Types and ranges of the fields the runtime uses, in a sidecar's JSON `data` (those present;
    `classifier_fields` says which a classifier needs). `where` and `hint` word the error for a record not yet
    published."""
    where = where or f"{Path(path).name}.json"

    def bad(field: str, value, want: str) -> SidecarError:
        return SidecarError(f"{where}: {field} is {value!r}, expected {want}; {hint}")

    if "classes" in data:
        classes = data["classes"]
        if not isinstance(classes, list) or not classes or not all(isinstance(c, str) for c in classes):
            raise bad("classes", classes if not isinstance(classes, list) else f"a list of {len(classes)}",
                      "a non-empty list of class names")
    if "preprocess" in data:
        pre = data["preprocess"]
        if not isinstance(pre, dict):
            raise bad("preprocess", pre, "an object with size, mean and std")
        size = pre.get("size")
        if not isinstance(size, int) or isinstance(size, bool) or not 1 <= size <= MAX_SIZE:
            raise bad("preprocess.size", size, f"an integer from 1 to {MAX_SIZE}")
        # pixels are normalised from [0, 1]: a mean far outside it or a tiny deviation only makes inf inputs,
        # which would be blamed on every image instead of on the sidecar
        if not _numbers(pre.get("mean"), 3) or max(map(abs, pre["mean"])) > 10:
            raise bad("preprocess.mean", pre.get("mean"), "3 numbers from -10 to 10")
        if not _numbers(pre.get("std"), 3) or min(pre["std"]) < 1e-6 or max(pre["std"]) > 1e3:
            raise bad("preprocess.std", pre.get("std"), "3 positive numbers from 1e-6 to 1000")
    if "batch" in data:
        batch = data["batch"]
        if batch != "dynamic" and (not isinstance(batch, int) or isinstance(batch, bool)
                                   or not 1 <= batch <= MAX_STATIC_BATCH):
            raise bad("batch", batch, f'"dynamic" or an integer from 1 to {MAX_STATIC_BATCH}')
    if "onnxruntime" in data:
        ort = data["onnxruntime"]
        session = ort.get("session", {}) if isinstance(ort, dict) else None
        if not isinstance(session, dict):
            raise bad("onnxruntime", ort, "an object with a session object")
        try:
            check_threads(session.get("threads"), "onnxruntime.session.threads")
        except ValueError as e:
            raise SidecarError(f"{where}: {e}; {hint}") from None
        requires = ort.get("requires")
        if requires is not None and (not isinstance(requires, str) or not re.fullmatch(r"\d{1,3}\.\d{1,3}", requires)):
            raise bad("onnxruntime.requires", requires, 'a version such as "1.23"')
    if "attention" in data:
        att = data["attention"]
        if not isinstance(att, dict) or not all(isinstance(att.get(k), str) for k in ("form", "op")):
            raise bad("attention", att, "an object with the form and op names")
        head, padded = att.get("head_size"), att.get("padded_to")
        if head is not None and not _count(head, MAX_HEAD):
            raise bad("attention.head_size", head, f"an integer from 1 to {MAX_HEAD}")
        if padded is not None and not (_count(padded, MAX_HEAD) and head is not None and padded > head):
            raise bad("attention.padded_to", padded, f"null or an integer above attention.head_size, up to {MAX_HEAD}")
        if "reason" in att and not isinstance(att["reason"], str):
            raise bad("attention.reason", att["reason"], "a string")
    if "engine" in data:
        engine = data["engine"]
        flags = engine.get("flags", {}) if isinstance(engine, dict) else None
        profile = flags.get("profile", {}) if isinstance(flags, dict) else None
        if not isinstance(profile, dict):
            raise bad("engine", engine if not isinstance(engine, dict) else "malformed",
                      "an object whose flags and profile are objects")
        top = profile.get("max")
        if top is not None and (not isinstance(top, int) or isinstance(top, bool) or not 1 <= top <= MAX_STATIC_BATCH):
            raise bad("engine.flags.profile.max", top, f"an integer from 1 to {MAX_STATIC_BATCH}")
    if "profile" in data:
        prof = data["profile"]
        if not isinstance(prof, dict) or not isinstance(prof.get("name"), str):
            raise bad("profile", prof, "an object with the device profile's name")
    if "input" in data:
        check_input_field(data["input"], bad)
    if "precision" in data and data["precision"] not in PRECISIONS:
        raise bad("precision", data["precision"], f"one of {', '.join(PRECISIONS)}")
    if "runtime" in data and data["runtime"] not in RUNTIMES:
        raise bad("runtime", data["runtime"], f"one of {', '.join(RUNTIMES)}")


def check_runtime(record: ArtifactRecord, runtime: str, path: str | Path) -> None:
    """Refuse, in one line, to hand an artifact made for one runtime to another (an INT8 graph tuned
    for ONNX Runtime's CPU kernels is not TensorRT's QDQ recipe)."""
    made_for = record.runtime
    if made_for not in ("any", runtime):
        raise SidecarError(f"{Path(path).name} was made for {made_for}, not {runtime}; build the {runtime} "
                           f"artifact from the fp32 ONNX or the checkpoint: mlit-edge build ... --target {runtime}")


def version_pair(text: str) -> tuple[int, ...]:
    """"1.23.2" -> (1, 23): an ONNX Runtime version as its major and minor, to compare."""
    return tuple(int(p) for p in re.findall(r"\d+", text)[:2])


# the oldest ONNX Runtime measured to load a graph of this opset (1.22.1 cannot load opset 23; 1.23.2 can:
# docs/measurements.md, the ONNX Runtime flavour)
OPSET_NEEDS = {23: "1.23"}


def onnxruntime_needed(record: ArtifactRecord, opset: int | None = None) -> str:
    """The oldest ONNX Runtime that runs the artifact: its sidecar's `onnxruntime.requires` or what its graph's
    opset needs (OPSET_NEEDS), whichever is newer; "0.0" where neither says."""
    needs = [v for k, v in OPSET_NEEDS.items() if opset is not None and opset >= k] + [record.ort_requires or "0.0"]
    return max(needs, key=version_pair)


def check_onnxruntime(record: ArtifactRecord, installed: str, path: str | Path, opset: int | None = None) -> None:
    """Refuse, in one line and before the session is made, an artifact whose graph needs a newer ONNX
    Runtime than `installed` (a fused attention op: opset 23's Attention came in 1.23). `opset`: the graph's
    own opset import, so a sidecar that lost its `onnxruntime.requires` is no way past the check."""
    need = onnxruntime_needed(record, opset)
    if version_pair(installed) < version_pair(need):
        op = record.attention_op or "its ops"
        raise SidecarError(f"{Path(path).name} needs ONNX Runtime {need} or newer for {op}; this is {installed}: "
                           "pip install -U onnxruntime, or build the portable graph for it (mlit-edge export)")


def check_classifier_record(record: ArtifactRecord, where: str, hint: str) -> None:
    """Classes and preprocess, both required and checked as `check_record` checks them, in a record not yet
    published (`where` and `hint` word the error)."""
    check_record({k: record.raw.get(k) for k in ("classes", "preprocess")}, "", where=where, hint=hint)


def classifier_fields(record: ArtifactRecord, path: str | Path) -> None:
    """The fields without which an artifact cannot classify: classes and preprocessing."""
    missing = [k for k in ("classes", "preprocess") if k not in record.raw]
    if missing:
        raise SidecarError(f"{Path(path).name}.json lacks {missing}: not an mlit-edge classifier sidecar; "
                           "rebuild the artifact with mlit-edge build")
    check_record(record.raw, path)
