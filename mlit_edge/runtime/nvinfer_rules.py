"""DeepStream's own rules, replayed on the files `export-deepstream` writes, before they are published.

Every rule is read from DeepStream 6.2's sources (NVDS_VERSION 6.2.0, sources/includes/nvds_version.h; the
public copy github.com/hiennguyen9874/deepstream-sources, commit f994831), cited beside it as FILE FUNCTION:
- PP  sources/gst-plugins/gst-nvinfer/gstnvinfer_property_parser.cpp: each [property] key's GLib type and values
  (the table is `nvinfer_rules_data.PROPERTY`).
- CTX sources/libs/nvdsinfer/nvdsinfer_context_impl.cpp, OUT nvdsinfer_context_impl_output_parsing.cpp,
  MB nvdsinfer_model_builder.cpp, BE nvdsinfer_backend.cpp: what the inference context does with the values
  and the model.
- CFP sources/apps/apps-common/src/deepstream_config_file_parser.c, APP sources/apps/sample_apps/deepstream-app/
  deepstream_app_config_parser.c and deepstream_app.c: deepstream-app (`nvinfer_rules_data.APP_GROUPS`).
Both read their files with GLib's key file, replayed by `glib_keyfile`.
A rule marked [ours] is this project's, not DeepStream's (the threshold is a probability: the graph ends in
Softmax). `check_nvinfer` and `check_app` return the problems, one line each; an empty list passes.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

from .glib_keyfile import READERS, KeyFileError, parse_keyfile
from .nvinfer_rules_data import APP_GROUPS, IO_FORMATS, IO_TYPES, MAX_BATCH, NETWORK_MODES, PROPERTY, Entry

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


def _load(path: Path) -> Dict[str, Dict[str, str]]:
    return parse_keyfile(path.read_text(encoding="utf-8"))


def check_nvinfer(config: Path, facts: ModelFacts) -> List[str]:
    """The problems nvinfer would have with the config file `config` and the model `facts` describe."""
    config = Path(config)
    try:
        groups = _load(config)
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
    problems += _batch_problems(batch, facts) + _output_problems(v, facts, bool(onnx))
    if v.get("network-type") != 1 or v.get("process-mode", 1) != 1:
        problems.append("[ours] network-type=1 and process-mode=1: the model classifies whole frames")
    threshold = v.get("classifier-threshold", 0.0)
    if facts.probabilities and not 0.0 <= threshold <= 1.0:
        problems.append(f"classifier-threshold={threshold:g}: [ours] a probability in [0, 1] (the output is Softmax; "
                        "OUT parseAttributesFromSoftmaxLayers keeps the top class when it is above the threshold)")
    labels = v.get("labelfile-path")
    if not labels or not (folder / labels).is_file():
        problems.append("labelfile-path: no labels file (CTX InferPostprocessor::parseLabelsFile: 'Could not open "
                        "labels file')")
    else:
        problems += labels_problems((folder / labels).read_text(encoding="utf-8"), facts.classes,
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


def _app_group(name: str) -> Optional[str]:
    """The APP_GROUPS entry a deepstream-app group is parsed by (APP parse_config_file: [source<N>], [sink<N>])."""
    if name in APP_GROUPS:
        return name
    for prefix in ("source", "sink"):
        if re.fullmatch(prefix + r"[0-9]+", name):
            return prefix
    return None


def check_app(app: Path, config: Path) -> List[str]:
    """The problems deepstream-app would have with `app`, whose [primary-gie] runs the nvinfer config `config`."""
    app = Path(app)
    try:
        groups, infer = _load(app), _load(Path(config))
    except (KeyFileError, UnicodeDecodeError) as e:
        return [f"{app.name}: GLib would refuse it: {e}"]
    problems: List[str] = []
    values: Dict[str, Dict[str, Any]] = {}
    for name in groups:
        rules = _app_group(name)
        if rules is None:
            problems.append(f"[{name}]: [ours] a group this export does not write, so none it checks")
            continue
        values[name] = read_group(groups, name, APP_GROUPS[rules], "deepstream-app", problems)
    # CFP parse_source/parse_gie/parse_sink skip a group whose enable is not a non-zero integer
    sources = [g for n, g in values.items() if _app_group(n) == "source" and g.get("enable")]
    sinks = [g for n, g in values.items() if _app_group(n) == "sink" and g.get("enable")]
    if not sources or not sinks:
        problems.append("no enabled [source<N>] or [sink<N>] (CFP parse_source, parse_sink: enable=0 skips it)")
    count = sum(max(1, g.get("num-sources", 1)) if g.get("type") == 3 else 1 for g in sources)
    for g in sources:
        uri = g.get("uri", "")
        if g.get("type") in (2, 3) and not uri:
            problems.append("a URI source without uri (CFP parse_source)")
        if g.get("type") == 3 and "%" in uri.replace("%%", ""):
            problems.append(f"uri={uri}: a MultiURI source's uri is a printf format (APP parse_config_file: "
                            "g_strdup_printf(uri, j)), so each '%' must be written '%%'")
    gie, mux = values.get("primary-gie", {}), values.get("streammux", {})
    if not gie.get("enable") or not gie.get("config-file"):
        problems.append("[primary-gie] needs enable=1 and config-file (CFP parse_gie: 'Config file not provided')")
    elif (app.parent / gie["config-file"]).resolve() != Path(config).resolve():
        problems.append(f"[primary-gie] config-file={gie['config-file']} is not {Path(config).name}")
    prop = infer.get("property", {})
    try:  # a malformed value is check_nvinfer's to report
        infer_batch = READERS["int"](prop.get("batch-size", "1"))
        unique = READERS["int"](prop.get("gie-unique-id", "0"))
    except KeyFileError:
        infer_batch = unique = None
    if not gie.get("batch-size") == mux.get("batch-size") == infer_batch == count:
        problems.append(f"[ours] batch-size: streammux {mux.get('batch-size')}, primary-gie {gie.get('batch-size')}, "
                        f"nvinfer {infer_batch}, sources {count}: one frame of each source per batch, the batch "
                        "nvinfer's engine is built for (deepstream-app sets nvinfer's batch-size from primary-gie)")
    if "gie-unique-id" in prop and gie.get("gie-unique-id") not in (None, unique):
        problems.append("[primary-gie] gie-unique-id differs from the nvinfer config's (it overrides it)")
    if count > 1 and values.get("tiled-display", {}).get("enable", 0) == 0:
        problems.append(f"{count} sources without [tiled-display]: deepstream-app then processes only the sources "
                        "a sink names by source-id (deepstream_app.c create_pipeline, is_sink_available_for_source_id)")
    return problems


__all__ = ["read_group", "ModelFacts", "engine_cache_name", "labels_problems", "check_nvinfer",
           "check_app", "MAX_BATCH", "NETWORK_MODES"]
