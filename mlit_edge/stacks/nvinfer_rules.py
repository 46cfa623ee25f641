"""DeepStream's own rules, replayed on the files `export-deepstream` writes, before they are published.

Every rule is read from DeepStream 6.2's sources (NVDS_VERSION 6.2.0, sources/includes/nvds_version.h; the
public copy github.com/hiennguyen9874/deepstream-sources, commit f994831), cited beside it as FILE FUNCTION:
- PP  sources/gst-plugins/gst-nvinfer/gstnvinfer_property_parser.cpp: each [property] key's GLib type and values
  (the table is `nvinfer_rules_data.PROPERTY`).
- GST sources/gst-plugins/gst-nvinfer/gstnvinfer.cpp: what the element does with them (secondary mode).
- CTX sources/libs/nvdsinfer/nvdsinfer_context_impl.cpp, OUT nvdsinfer_context_impl_output_parsing.cpp,
  MB nvdsinfer_model_builder.cpp, BE nvdsinfer_backend.cpp: what the inference context does with the values
  and the model.
nvinfer reads its file with GLib's key file, replayed by `glib_keyfile`; deepstream-app's rules are in
`deepstream_app_rules`. A rule marked [ours] is this project's, not DeepStream's (the threshold is a probability:
the graph ends in Softmax). `check_nvinfer` returns the problems, one line each; an empty list passes.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

from .glib_keyfile import READERS, KeyFileError, parse_keyfile
from .nvinfer_rules_data import IO_FORMATS, IO_TYPES, MAX_BATCH, MIN_OBJECT, NETWORK_MODES, PROPERTY, Entry
from ..base.textfile import read_text

# the keys only GST should_infer_object reads, which only gst_nvinfer_process_objects calls (process-mode=2)
OBJECT_KEYS = ("operate-on-gie-id", "operate-on-class-ids", "input-object-min-width", "input-object-min-height",
               "input-object-max-width", "input-object-max-height", "secondary-reinfer-interval")


def _violation(value: Any, allowed: Any) -> Optional[str]:
    """What `value` should have been under the data's `allowed` spec (nvinfer_rules_data), None if it is."""
    if allowed is None:
        return None
    what = allowed[0]
    if what == "min":  # the parsers refuse `value < min` (so nan passes, as it does there)
        return f">= {allowed[1]}" if value < allowed[1] else None
    if what == "range":
        return None if allowed[1] <= value <= allowed[2] else f"in [{allowed[1]}, {allowed[2]}]"
    if what == "in":
        return None if value in allowed[1] else f"one of {', '.join(map(str, allowed[1]))} ({allowed[2]})"
    if what == "dims":
        return None if len(value) == allowed[1] and min(value) > 0 else f"{allowed[1]} positive dims"
    if what == "max_len":
        return None if len(value) <= allowed[1] else f"at most {allowed[1]} values"
    if what == "each_min":
        return None if all(v >= allowed[1] for v in value) else f"each >= {allowed[1]}"
    if what == "class_ids":  # deepstream-app writes them as "%d:" into a fixed buffer: a longer list is cut short
        fits = len("".join(f"{v}:" for v in value)) <= allowed[1]
        return None if fits and all(v >= 0 for v in value) else f"ids >= 0, at most {allowed[1]} characters as '%d:'"
    bad = [f for f in value if not (len(f.split(":")) == 3 and f.split(":")[0] and f.split(":")[1] in IO_TYPES
                                    and f.split(":")[2] in IO_FORMATS)]
    return f"name:type:format, type in {IO_TYPES}, format in {IO_FORMATS}" if bad else None


def read_group(groups: Dict[str, Dict[str, str]], group: str, rules: Dict[str, Entry], reader: str,
               problems: List[str]) -> Dict[str, Any]:
    """Each key of `group` read as its entry's GLib type and checked against the values its parser accepts;
    a key no entry knows is a problem too (the parsers print 'Unknown key' and ignore it: a typo would silently
    not apply)."""
    values: Dict[str, Any] = {}
    for key, raw in groups.get(group, {}).items():
        if key not in rules:
            problems.append(f"[{group}] {key}: not a key {reader} reads (it would be ignored)")
            continue
        kind, allowed, source = rules[key]
        try:
            value = READERS[kind](raw)
        except KeyFileError as e:
            problems.append(f"[{group}] {key}={raw}: {e} ({source})")
            continue
        want = _violation(value, allowed)
        if want:
            problems.append(f"[{group}] {key}={raw}: must be {want} ({source})")
        values[key] = value
    return values


@dataclass(frozen=True)
class ModelFacts:
    """What nvinfer will find in the model the config names (read from the graph, or a plan's sidecar)."""

    chw: Tuple[int, ...]  # the image input's C, H, W
    outputs: Tuple[Tuple[str, str], ...]  # (name, element type: "float32", "float16", ...)
    classes: int
    batch: Optional[int] = None  # the graph's fixed batch; None: dynamic
    plan_profile: Optional[Tuple[int, int]] = None  # a plan's (min, max) batch; None: an ONNX nvinfer builds
    probabilities: bool = True  # [ours] the output is Softmax probabilities, so the threshold is one
    quantized: bool = False  # the graph carries Q/DQ INT8


def engine_cache_name(onnx_file: str, batch: int, gpu_id: int, mode: int) -> str:
    """The engine file nvinfer writes after building from `onnx_file`, beside it (MB TrtModelBuilder::buildModel:
    modelPath + "_b" + maxBatchSize + "_" + "gpu" + gpuId + "_" + networkMode2Str(networkMode) + ".engine")."""
    return f"{onnx_file}_b{batch}_gpu{gpu_id}_{NETWORK_MODES[mode]}.engine"


def labels_problems(text: str, classes: int, outputs: int) -> List[str]:
    """A classifier's labels file as nvinfer reads it (CTX InferPostprocessor::parseLabelsFile: one line per
    output layer, empty lines skipped, labels split on ';'; OUT parseAttributesFromSoftmaxLayers names class c
    of output l m_Labels[l][c])."""
    lines = [line.split(";") for line in text.split("\n") if line]
    if len(lines) != outputs:
        return [f"labels file: {len(lines)} non-empty lines; nvinfer reads one per output layer ({outputs}) "
                "(CTX InferPostprocessor::parseLabelsFile)"]
    return [f"labels file line {i + 1}: {len(labels)} labels for {classes} classes (CTX parseLabelsFile)"
            for i, labels in enumerate(lines) if len(labels) != classes]


def load_keyfile(path: Path) -> Dict[str, Dict[str, str]]:
    """The groups of a config file as GLib's key file holds them (KeyFileError or UnicodeDecodeError if not)."""
    return parse_keyfile(read_text(path, "DeepStream config"))


def check_nvinfer(config: Path, facts: ModelFacts) -> List[str]:
    """The problems nvinfer would have with the config file `config` and the model `facts` describe."""
    config = Path(config)
    try:
        groups = load_keyfile(config)
    except (KeyFileError, UnicodeDecodeError) as e:
        return [f"{config.name}: GLib would refuse it: {e}"]
    if "property" not in groups:
        return [f"{config.name}: no [property] group (PP gst_nvinfer_parse_config_file: it is mandatory)"]
    problems: List[str] = []
    v = read_group(groups, "property", PROPERTY, "nvinfer", problems)
    if problems:
        return problems
    folder = config.parent
    batch, mode, gpu = v.get("batch-size", 1), v.get("network-mode", 0), v.get("gpu-id", 0)
    onnx, engine = v.get("onnx-file"), v.get("model-engine-file")
    if not onnx and not engine:
        problems.append("no onnx-file nor model-engine-file: nothing to build or load "
                        "(MB TrtModelBuilder::buildNetwork: 'no model file matched')")
    if onnx and not (folder / onnx).is_file():
        problems.append(f"onnx-file={onnx}: no such file beside the config (MB OnnxModelParser::parseModel)")
    if onnx and engine != engine_cache_name(onnx, batch, gpu, mode):
        problems.append(f"model-engine-file={engine}: nvinfer caches the engine it builds as "
                        f"{engine_cache_name(onnx, batch, gpu, mode)} (MB TrtModelBuilder::buildModel), so any "
                        "other name rebuilds it at every start")
    if not onnx and engine and not (folder / engine).is_file():
        problems.append(f"model-engine-file={engine}: no such file, and no model to build it from")
    calib = v.get("int8-calib-file")
    if onnx and mode == 1 and not (calib and (folder / calib).is_file()):
        problems.append("network-mode=1 without an int8-calib-file that exists: nvinfer then builds in FP16 "
                        "without TensorRT's INT8 flag, which a Q/DQ graph needs (MB "
                        "TrtModelBuilder::configCommonOptions: 'INT8 calibration file not specified')")
    if facts.quantized and mode != 1:
        problems.append(f"network-mode={mode}: the graph is Q/DQ INT8, and nvinfer sets TensorRT's INT8 flag only "
                        "for network-mode=1 (MB TrtModelBuilder::configCommonOptions)")
    dims = tuple(v.get("infer-dims") or ())
    if dims and dims != tuple(facts.chw):
        problems.append(f"infer-dims={';'.join(map(str, dims))}: the model's input is {tuple(facts.chw)} "
                        "(BE TrtBackendContext::canSupportBatchDims; MB configExplicitOptions)")
    if v.get("model-color-format", 0) in (0, 1) and (dims or facts.chw)[0] != 3:
        problems.append("model-color-format RGB/BGR needs 3 input channels (CTX preparePreprocess)")
    if not v.get("net-scale-factor", 1.0) > 0:  # CTX preparePreprocess applies the scale and offsets only if > 0
        problems.append("net-scale-factor <= 0: nvinfer then applies neither it nor the offsets "
                        "(CTX NvDsInferContextImpl::preparePreprocess)")
    problems += _batch_problems(batch, facts) + _output_problems(v, facts, bool(onnx)) + _object_problems(v)
    if v.get("network-type") != 1:
        problems.append("[ours] network-type=1: the model is a classifier")
    threshold = v.get("classifier-threshold", 0.0)
    if facts.probabilities and not 0.0 <= threshold <= 1.0:
        problems.append(f"classifier-threshold={threshold:g}: [ours] a probability in [0, 1] (the output is Softmax; "
                        "OUT parseAttributesFromSoftmaxLayers keeps the top class when it is above the threshold)")
    labels = v.get("labelfile-path")
    if not labels or not (folder / labels).is_file():
        problems.append("labelfile-path: no labels file (CTX InferPostprocessor::parseLabelsFile: 'Could not open "
                        "labels file')")
    else:
        problems += labels_problems(read_text(folder / labels, "labels file"), facts.classes,
                                    len(facts.outputs))
    return problems


def _batch_problems(batch: int, facts: ModelFacts) -> List[str]:
    if facts.plan_profile is not None:
        low, high = facts.plan_profile
        if not low <= batch <= high:  # no model to rebuild from: the start fails
            return [f"batch-size={batch}: the plan's batch profile is {low} to {high} (BE "
                    "TrtBackendContext::canSupportBatchDims; CTX checkBackendParams)"]
    elif facts.batch is not None and facts.batch != batch:
        return [f"batch-size={batch}: the graph's batch is fixed at {facts.batch}"]
    elif facts.batch is not None and facts.batch != 1:
        return [f"the graph's batch is fixed at {facts.batch}, and nvinfer builds an ONNX with a batch profile from 1 "
                "(MB TrtModelBuilder::createDynamicParams: minBatchSize = 1 on the GPU): export it with a dynamic "
                "batch"]
    return []


def _object_problems(v: Dict[str, Any]) -> List[str]:
    """Secondary mode (process-mode=2: classify the objects a detector found) as nvinfer applies its keys."""
    secondary = v.get("process-mode", 1) == 2
    problems: List[str] = []
    if v.get("symmetric-padding") and not v.get("maintain-aspect-ratio"):
        problems.append("symmetric-padding=1 without maintain-aspect-ratio=1: nothing to pad (GST "
                        "get_converted_buffer pads only when it keeps the aspect)")
    if not secondary:
        given = [k for k in OBJECT_KEYS if k in v]
        problems += [f"{', '.join(given)}: read only in process-mode=2 (GST should_infer_object, called from "
                     "gst_nvinfer_process_objects alone), so with process-mode=1 they do nothing"] if given else []
        if v.get("classifier-async-mode"):
            problems.append("classifier-async-mode=1 with process-mode=1: nvinfer turns it off (GST gst_nvinfer_start: "
                            "'asynchronous mode is applicable for secondary classifiers only')")
        return problems
    for side in ("width", "height"):
        low, high = v.get(f"input-object-min-{side}", 0), v.get(f"input-object-max-{side}", 0)
        if 0 < low < MIN_OBJECT:
            problems.append(f"input-object-min-{side}={low}: nvinfer raises it to {MIN_OBJECT} (GST gst_nvinfer_start: "
                            f"MIN_INPUT_OBJECT_{side.upper()}); [ours] write {MIN_OBJECT} or more, what happens")
        if high > 0 and max(low, MIN_OBJECT) > high:
            problems.append(f"input-object-max-{side}={high} is below the minimum {max(low, MIN_OBJECT)}: no object "
                            "is classified (GST should_infer_object)")
    gie = v.get("operate-on-gie-id")
    if gie is not None and gie == v.get("gie-unique-id"):
        problems.append(f"operate-on-gie-id={gie} is this classifier's own gie-unique-id, and a classifier attaches "
                        "no objects: it would classify none (GST should_infer_object: unique_component_id)")
    return problems


def _output_problems(v: Dict[str, Any], facts: ModelFacts, builds: bool) -> List[str]:
    problems: List[str] = []
    names = [n for n, _ in facts.outputs]
    if len(names) != 1:  # OUT parseAttributesFromSoftmaxLayers: numAttributes = m_OutputLayerInfo.size()
        problems.append(f"the model has {len(names)} outputs, and nvinfer's classifier parser reads each one as an "
                        "attribute (OUT parseAttributesFromSoftmaxLayers)")
    blobs = list(v.get("output-blob-names") or [])
    if blobs != names:
        problems.append(f"output-blob-names={';'.join(blobs)}: the model's outputs are {names} "
                        "(CTX checkBackendParams: 'Could not find output layer')")
    formats = {f.split(":")[0]: f.split(":")[1] for f in v.get("output-io-formats") or []}
    for name, dtype in facts.outputs:
        read_as = formats.get(name) if builds else None  # output-io-formats applies when nvinfer builds
        if read_as is None and dtype != "float32":
            problems.append(f"output {name} is {dtype}, and nvinfer's classifier parser reads float (OUT "
                            "parseAttributesFromSoftmaxLayers: float *outputCoverageBuffer)"
                            + (f"; set output-io-formats={name}:fp32:chw" if builds else ""))
        elif read_as not in (None, "fp32"):
            problems.append(f"output-io-formats makes {name} {read_as}, and nvinfer's classifier parser reads float "
                            "(OUT parseAttributesFromSoftmaxLayers)")
    return problems


__all__ = ["read_group", "load_keyfile", "ModelFacts", "engine_cache_name", "labels_problems", "check_nvinfer",
           "MAX_BATCH", "NETWORK_MODES"]
