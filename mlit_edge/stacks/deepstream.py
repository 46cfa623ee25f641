"""DeepStream for one artifact: an `nvinfer` classifier config, its labels file, the model nvinfer runs and a
minimal `deepstream-app` config on a file source (`mlit-edge export-deepstream`), checked against DeepStream's
own parsing rules (`nvinfer_rules`, cited to DeepStream 6.2's sources) before the folder is published.

What the files say, and why:
- The model is a copy of the ONNX that ends in Softmax: one float32 `probabilities` output (`graph_outputs`),
  since nvinfer's default classifier parser reads every output as float probabilities. classifier-threshold is
  then a probability, 0 by default: the parser keeps the top class when it is above the threshold, so every
  frame gets its top class, with its probability as the confidence. A `.plan` cannot be edited: it is taken
  only when its one output already is float32 probabilities, built on a Jetson with TensorRT
  (`plan_consumer`); otherwise the ONNX is the fix.
- nvinfer builds the engine from the ONNX at the first start and caches it beside it under its own name,
  `<onnx>_b<batch>_gpu<id>_<mode>.engine` (nvdsinfer_model_builder.cpp, TrtModelBuilder::buildModel), which
  the config names as model-engine-file, so later starts load it instead of building again.
- Preprocessing: nvinfer computes `y = net-scale-factor * (x - offsets[c])` on pixels in [0, 255]. Our
  `(x / 255 - mean_c) / std_c` is that with net-scale-factor 1 / (255 std) and offsets 255 mean_c, when std is
  one number for every channel: a per-channel std is refused with the `--raw-input` export (then 1 and 0).
  nvinfer writes float32 into the input binding (nvdsinfer_context_impl.cpp, InferPreprocessor::transform;
  every NvDsInferConvert_* kernel outputs float): a `--input-dtype uint8` graph is refused the same way.
- network-type=1 (classifier), process-mode=1 (full frames; 2 with `secondary`: the objects a detector found,
  `deepstream_app`), network-mode 0/1/2 = FP32/INT8/FP16,
  model-color-format=0 (RGB), infer-dims C;H;W, scaling-filter=1 (bilinear: nearest cost the shipped model
  4.4 points of top-1 on enlarged digits, benchmarks/deepstream_resize.py). An INT8 (Q/DQ) graph gets
  network-mode=1 and an int8-calib-file that exists: without one nvinfer falls back to FP16 without
  TensorRT's INT8 flag, which a Q/DQ graph needs; the graph carries its own scales.
- batch-size is the number of sources (1, or `--batch N` copies of the file source), the same in
  [streammux], [primary-gie] and the nvinfer config; a graph of fixed batch must match it. In secondary mode
  the classifier's batch-size counts objects (`Secondary.batch`), the same in [secondary-gie0].
- Secondary mode keeps each crop's aspect, centred in black (maintain-aspect-ratio=1, symmetric-padding=1):
  on tight boxes the shipped model's top-1 was 0.89 so, 0.70 stretched (benchmarks/deepstream_crops.py).
- Every line of both configs passes one checker, GLib's key-file rules (`glib_keyfile.keyfile_text`): a value from
  an argument (--uri, --primary-config) or a sidecar (a plan's output name) that GLib would read as something
  else, or as more lines, is refused in one line; the model's copy gets a name of safe characters (`copy_name`).
Not run here: no DeepStream and no Jetson on the project's machines (docs/deepstream.md says what is verified).
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from .deepstream_app import (APP, CONFIG, LABELS, SAMPLE_STREAM, Secondary, app_config, check_secondary, check_uri,
                             secondary_keys)
from .deepstream_app_rules import check_app
from .glib_keyfile import keyfile_text
from ..artifacts.graph_outputs import PROBABILITIES, io_facts, with_probabilities
from .graph_record import TRT_DTYPES, check_sidecar, onnx_graph_io, parse_onnx, plan_graph_io
from ..artifacts.input_convention import NORMALISED, PIXELS, UINT8
from ..artifacts.model_io import describe
from ..base.messages import printable, require_file
from .nvinfer_rules import MAX_BATCH, ModelFacts, check_nvinfer, engine_cache_name
from ..devices.plan_consumer import check_plan_consumer, engine_io
from ..artifacts.staging import staged_folder
from ..artifacts.schema import ArtifactRecord, check_runtime, classifier_fields, recorded
from ..artifacts.sidecar import user_fields, write_sidecar
from ..artifacts.targets import PARSER_GRAPH

NETWORK_MODE = {"fp32": 0, "int8": 1, "fp16": 2}  # nvinfer's network-mode (NvDsInferNetworkMode)
CALIB = "int8-calib-file.txt"
STD_TOLERANCE = 1e-9  # [ours] relative: the channels' std must be one number for one net-scale-factor
MAX_STEM = 100  # [ours] room for nvinfer's "_b1024_gpu0_fp16.engine" after the copy's name within NAME_MAX (255)


def scale_and_offsets(record: ArtifactRecord, path: str | Path) -> tuple[float, list[float]]:
    """nvinfer's net-scale-factor and per-channel offsets that reproduce the artifact's input; ValueError with
    the fix when one scale factor cannot (a per-channel std)."""
    if record.input_convention == PIXELS:
        return 1.0, [0.0, 0.0, 0.0]
    pre = record.preprocess
    if pre is None:
        raise ValueError(f"{Path(path).name}.json records no preprocess: not a classifier's sidecar")
    mean, std = [float(m) for m in pre.mean], [float(s) for s in pre.std]
    if max(std) - min(std) > STD_TOLERANCE * max(std):
        ckpt = record.checkpoint or "CKPT"
        raise ValueError(f"{Path(path).name}: nvinfer takes one net-scale-factor, but this model's std differs per "
                         f"channel ({', '.join(f'{s:g}' for s in std)}): export the normalisation into the graph, "
                         f"mlit-edge export --checkpoint {ckpt} --raw-input, and export-deepstream that")
    return 1.0 / (255.0 * std[0]), [255.0 * m for m in mean]


def labels_text(classes: Sequence[str], path: str | Path) -> str:
    """The classifier labels file: one line (one output layer), the classes in order separated by ';'."""
    bad = [c for c in classes if ";" in c or not c.isprintable()]
    if bad:
        raise ValueError(f"{Path(path).name}: class name {bad[0]!r} holds ';' or a line break (or another "
                         "unprintable character), which DeepStream's labels file uses to separate classes; rename "
                         "the class")
    return ";".join(classes) + "\n"


def copy_name(artifact: Path, suffix: str) -> str:
    """The file name of the artifact's copy in the DeepStream folder: its stem with every character but letters,
    digits, '_', '.', '+' and '-' made '_', no leading dot or dash (not hidden, not an option), at most
    `MAX_STEM` characters, then `suffix`. The name is written into the nvinfer config (onnx-file,
    model-engine-file, and nvinfer's own engine cache name after it), which GLib's key file reads line by line
    and with leading spaces dropped (`glib_keyfile.value_problem`): a name of the user's own choosing, such as
    one holding a line break and '[property]', must not become the config's text."""
    stem = artifact.name[:-len(artifact.suffix)] if artifact.suffix else artifact.name
    safe = re.sub(r"[^\w.+-]", "_", stem).lstrip(".-")[:MAX_STEM]
    return (safe or "model") + suffix


@dataclass(frozen=True)
class Model:
    """The model file that goes into the folder, its sidecar's fields (the JSON to write) and what nvinfer will
    find in it."""

    name: str
    content: bytes
    info: dict
    facts: ModelFacts


def _onnx_model(artifact: Path, content: bytes, record: ArtifactRecord) -> Model:
    """The DeepStream copy of an ONNX: its graph ending in float32 probabilities, with its own sidecar."""
    try:
        import onnx  # noqa: F401
    except ImportError:
        raise ValueError(f"{artifact.name}: the DeepStream copy of an ONNX (its probabilities output) needs the onnx "
                         "package: pip install onnx, or run export-deepstream on the workstation") from None
    check_sidecar(record, onnx_graph_io(parse_onnx(content, artifact)), artifact)  # predict's refusals
    try:
        copy = with_probabilities(content)
    except ValueError as e:
        raise ValueError(f"{artifact.name}: {e}") from None
    inputs, outputs, quantized = io_facts(copy)
    name, dtype, dims = inputs[0]
    if any(not isinstance(d, int) for d in dims[1:]) or len(dims) != 4:
        raise ValueError(f"{artifact.name}: its input {name!r} is {dims}, expected (batch, 3, H, W) with H and W fixed")
    derived = user_fields(record.to_json())
    derived.update(outputs=[PROBABILITIES], made_from={"artifact": artifact.name, "sha256": record.sha256},
                   output={"name": PROBABILITIES, "kind": "probabilities", "dtype": "float32",
                           "op": "Softmax over the classes of logits (graph_outputs.with_probabilities)"})
    classes = outputs[0][2][-1] or len(record.classes or ())  # the graph's own count, which the labels must match
    facts = ModelFacts(tuple(dims[1:]), tuple((o[0], o[1]) for o in outputs), classes, batch=dims[0],
                       quantized=quantized)
    return Model(copy_name(artifact, "-probabilities.onnx"), copy, derived, facts)


def _plan_model(artifact: Path, content: bytes, record: ArtifactRecord) -> Model:
    """A plan, as it is: taken only when DeepStream on a Jetson loads it and its one output is float32
    probabilities (a plan cannot be given a Softmax or a Cast)."""
    check_plan_consumer(record, artifact, "deepstream")
    inputs, outputs = engine_io(record, artifact)  # every field checked, one line naming it
    said = [(t.name, TRT_DTYPES.get(t.dtype, t.dtype)) for t in outputs]
    probabilities = record.output_kind == "probabilities"
    if len(said) != 1 or said[0][1] != "float32" or not probabilities:
        got = ", ".join(f"{n} ({d})" for n, d in said) or "no recorded outputs"
        raise ValueError(f"{artifact.name} outputs {got}, and nvinfer's classifier parser reads one float32 output "
                         "of probabilities; a plan cannot be changed: pass the ONNX it was built from "
                         f"({record.source_onnx or 'X.onnx'}) to export-deepstream instead (nvinfer builds "
                         "and caches the engine itself)")
    shape = list(inputs[0].shape)
    if len(shape) != 4 or not all(d > 0 for d in shape[1:]):
        raise ValueError(f"{artifact.name}.json records no (batch, 3, H, W) input in engine.io; rebuild the plan")
    check_sidecar(record, plan_graph_io(record, artifact), artifact, scores=said[0][0])  # predict's refusals
    fixed = shape[0] if shape[0] > 0 else None
    profile = (fixed, fixed) if fixed else (int(record.min_batch or 1), int(record.max_batch or 1))
    out_shape = outputs[0].shape
    classes = out_shape[-1] if out_shape and out_shape[-1] > 0 else len(record.classes or ())
    facts = ModelFacts(tuple(shape[1:]), tuple(said), classes, plan_profile=profile)
    return Model(copy_name(artifact, ".plan"), content, record.to_json(), facts)


def nvinfer_config(record: ArtifactRecord, model: Model, path: str | Path, batch: int = 1, threshold: float = 0.0,
                   secondary: Secondary | None = None) -> str:
    """The `[property]` group of an nvinfer classifier running `model` (beside the config) on `batch` frames, or
    with `secondary` on batches of `batch` objects of the detector's."""
    scale, offsets = scale_and_offsets(record, path)
    c, h, w = model.facts.chw
    precision = record.precision
    mode, output = NETWORK_MODE[precision], model.facts.outputs[0][0]
    lines = [f"# mlit-edge: {printable(Path(path).name)}; the input takes {printable(describe(record))}",
             "# the model outputs probabilities (Softmax, float32): classifier-threshold is a probability, and the "
             "top class is attached when it is above it",
             "[property]", "gpu-id=0", f"net-scale-factor={scale!r}", "offsets=" + ";".join(repr(o) for o in offsets),
             "model-color-format=0"]
    if model.name.endswith(".onnx"):
        lines += [f"onnx-file={model.name}",
                  "# the engine nvinfer builds at the first start and caches under this name, loaded at later starts",
                  f"model-engine-file={engine_cache_name(model.name, batch, 0, mode)}"]
    else:
        lines.append(f"model-engine-file={model.name}")
    if mode == NETWORK_MODE["int8"] and model.name.endswith(".onnx"):
        lines += ["# INT8 is in the graph (Q/DQ): nvinfer sets TensorRT's INT8 flag only when int8-calib-file names",
                  "# a file that exists; the Q/DQ scales are used, not that file", f"int8-calib-file={CALIB}"]
    lines += [f"labelfile-path={LABELS}", f"infer-dims={c};{h};{w}", f"batch-size={batch}", f"network-mode={mode}",
              "network-type=1"]
    if secondary is None:
        lines += ["process-mode=1", "gie-unique-id=1"]
    else:  # PP gst_nvinfer_parse_other_attribute: 2 classifies the objects of operate-on-gie-id's detector
        lines += ["# 2: secondary: the objects the detector (operate-on-gie-id) found, each crop scaled to infer-dims",
                  "process-mode=2", f"gie-unique-id={secondary.unique_id}", *secondary_keys(secondary)]
    lines.append(f"output-blob-names={output}")
    if model.name.endswith(".onnx"):  # applied when nvinfer builds: the classifier parser reads float
        lines.append(f"output-io-formats={output}:fp32:chw")
    lines.append(f"classifier-threshold={float(threshold)!r}")
    if secondary is None:
        lines.append("maintain-aspect-ratio=0")
    else:  # GST get_converted_buffer: scaled to fit, black around (the digits' own background)
        lines += ["# crops keep their aspect, centred: on tight boxes the shipped model's top-1 was 0.70 stretched,",
                  "# 0.78 padded right-bottom, 0.89 centred (benchmarks/deepstream_crops.py, docs/deepstream.md)",
                  "maintain-aspect-ratio=1", "symmetric-padding=1"]
    lines += ["# 1: NvBufSurfTransformInter_Bilinear (nvbufsurftransform.h); nearest cost the shipped model 4.4 points",
              "# of top-1 on enlarged digits (benchmarks/deepstream_resize.py, docs/runtime.md)", "scaling-filter=1"]
    # every line as GLib will read it; the names nvinfer reads as lists are one item each
    return keyfile_text(lines, CONFIG, items={"output-blob-names": 1, "output-io-formats": 1})


def check_options(batch: int, threshold: float) -> None:
    """ValueError (one line) for a batch nvinfer does not take or a threshold that is no probability."""
    if not 1 <= batch <= MAX_BATCH:
        raise ValueError(f"--batch {batch}: nvinfer's batch-size is 1 to {MAX_BATCH} (NVDSINFER_MAX_BATCH_SIZE)")
    if not 0.0 <= threshold <= 1.0:  # nan fails too
        raise ValueError(f"--threshold {threshold}: a probability from 0 to 1 (the model outputs probabilities)")


def write_deepstream(artifact: str | Path, out: str | Path, uri: str = SAMPLE_STREAM, batch: int = 1,
                     threshold: float = 0.0, secondary: Secondary | None = None) -> Path:
    """`out/` with the model, its nvinfer config, labels and a deepstream-app config; everything checked
    (DeepStream's rules replayed on the files themselves) before the folder is renamed into place. `batch` is
    the number of sources; with `secondary`, the classifier batches `secondary.batch` objects."""
    artifact, out = Path(artifact), Path(out)
    if artifact.suffix not in (".plan", ".onnx"):
        raise ValueError(f"{artifact.name}: DeepStream runs a .plan (TensorRT) or an .onnx it builds itself")
    require_file(artifact)  # a folder, FIFO or device is said as such
    check_options(batch, threshold)
    check_uri(uri)
    if secondary is not None:
        check_secondary(secondary)
    content = artifact.read_bytes()
    record = recorded(artifact, content)  # the sha256 of these bytes, or one line
    classifier_fields(record, artifact)
    check_runtime(record, PARSER_GRAPH, artifact)  # an ONNX Runtime artifact's fused attention is no TensorRT graph
    model = (_plan_model if artifact.suffix == ".plan" else _onnx_model)(artifact, content, record)
    if record.input_dtype == UINT8:
        ckpt = record.checkpoint or "CKPT"
        raise ValueError(f"{artifact.name} takes uint8 input, and nvinfer feeds float32 (its preprocessing writes "
                         f"float into the input binding): export the float32 pixels graph, mlit-edge export "
                         f"--checkpoint {ckpt} --raw-input, and export-deepstream that")
    infer_batch = secondary.batch if secondary else batch  # objects per batch in secondary mode, else frames
    config = nvinfer_config(record, model, artifact, infer_batch, threshold, secondary)
    labels = labels_text(record.classes or (), artifact)
    app = app_config(uri, batch, secondary)
    if os.path.lexists(out):
        raise FileExistsError(f"{out} already exists; remove it or pass another --out")
    if not out.parent.is_dir():
        raise FileNotFoundError(f"output folder {out.parent} does not exist")
    with staged_folder(out) as staging:  # renamed to `out` whole, or removed (a killed run's: by the next run)
        (staging / model.name).write_bytes(model.content)  # the very bytes that were checked
        write_sidecar(staging / model.name, model.info)
        (staging / CONFIG).write_text(config, encoding="utf-8")  # GLib reads UTF-8 only (g_key_file_parse_line)
        (staging / LABELS).write_text(labels, encoding="utf-8")
        (staging / APP).write_text(app, encoding="utf-8")
        if f"int8-calib-file={CALIB}" in config.splitlines():
            (staging / CALIB).write_text("mlit-edge: no calibration table. nvinfer sets TensorRT's INT8 flag only "
                                         "when int8-calib-file names a file that exists; the model is Q/DQ INT8, "
                                         "whose scales are in the graph.\n")
        problems = check_nvinfer(staging / CONFIG, model.facts) + check_app(staging / APP, staging / CONFIG)
        if problems:
            raise ValueError(f"{artifact.name}: the DeepStream files would fail: {problems[0]}"
                             + (f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""))
    return out


__all__ = ["NORMALISED", "PIXELS", "APP", "CONFIG", "LABELS", "SAMPLE_STREAM", "Secondary", "scale_and_offsets",
           "labels_text", "nvinfer_config", "app_config", "check_options", "write_deepstream"]
