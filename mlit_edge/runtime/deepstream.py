"""DeepStream for one artifact: an `nvinfer` classifier config, its labels file and a minimal `deepstream-app`
config that runs it on a file, written from the artifact's sidecar (`mlit-edge export-deepstream`).

What the files say, and where NVIDIA documents it (the Gst-nvinfer page of the DeepStream developer guide,
https://docs.nvidia.com/metropolis/deepstream/dev-guide/text/DS_plugin_gst-nvinfer.html; the property names
as `gstnvinfer_property_parser.h` defines them):
- nvinfer's preprocessing is `y = net-scale-factor * (x - offsets[c])`, x the scaled pixel in [0, 255]. Our
  normalisation `(x / 255 - mean_c) / std_c` is that with net-scale-factor 1 / (255 std) and offsets 255 mean_c,
  but only when std is the same for every channel: one net-scale-factor cannot hold ImageNet's three. Such an
  artifact is refused with the `--raw-input` export that moves the normalisation into the graph (then 1 and 0).
- `network-type=1` is a classifier, `process-mode=1` the full frame, `network-mode` 0/1/2 is FP32/INT8/FP16,
  `model-color-format=0` RGB (our models take RGB), `infer-dims` is C;H;W, `output-blob-names` our `logits`.
- A classifier's labels file is one line per output layer, the labels separated by ';' (the same guide's
  labelfile-path): a class name holding ';' or a line break would shift every later class, and is refused.
- The graph outputs logits, not probabilities. nvinfer's default classifier parser attaches the class of the
  largest output value when that value is above `classifier-threshold` (the SDK's sample softmax parser,
  `nvdsinfer_customclassifierparser.cpp`, reads the outputs as probabilities the same way), so a threshold
  meant as a probability would be compared with a logit. The config sets it far below any logit, so the
  threshold never hides the top class; but the parser's running maximum starts at 0 (DeepStream 7.0's
  nvdsinfer_context_impl_output_parsing.cpp, ClassifyPostprocessor::parseAttributesFromSoftmaxLayers), so an
  image whose every logit is negative gets no class. The confidence in the metadata is a logit.
- nvinfer feeds float32 only: its preprocessing (sources/libs/nvdsinfer/nvdsinfer_context_impl.cpp,
  InferPreprocessor::transform) writes each frame into the input binding through an NvDsInferConvert_* kernel,
  and every one of them writes float (nvdsinfer_conversion.h: "planar float output", `float *outBuffer`). A
  `--input-dtype uint8` graph would read those bytes as pixels, so it is refused with the float32 export.
- The resize is the one step that can still differ: nvinfer scales with its own filter (`scaling-filter`, an
  NvBufSurfTransformInter value). The config asks for bilinear (1), measured close to ours; nearest is not.
Not run here: no DeepStream and no Jetson on the project's machines. The tests parse every file with GLib's
own key-file parser (what DeepStream reads them with) and replay the preprocessing on real images.
"""
from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import Sequence

from .input_convention import NORMALISED, PIXELS, UINT8, check_graph, convention_of, describe, dtype_of
from .schema import ArtifactRecord, check_runtime, classifier_fields
from .sidecar import read_sidecar

NETWORK_MODE = {"fp32": 0, "int8": 1, "fp16": 2}  # nvinfer's network-mode
ALWAYS = -1e9  # classifier-threshold below any logit (the parser still drops a top logit <= 0: module docstring)
CONFIG, LABELS, APP = "config_infer_mlit.txt", "labels.txt", "deepstream_app_config.txt"
SAMPLE_STREAM = "file:///opt/nvidia/deepstream/deepstream/samples/streams/sample_720p.mp4"  # in every install
STD_TOLERANCE = 1e-9  # [ours] relative: the channels' std must be one number for one net-scale-factor


def scale_and_offsets(record: dict, path: str | Path) -> tuple[float, list[float]]:
    """nvinfer's net-scale-factor and per-channel offsets that reproduce the artifact's input; ValueError with
    the fix when one scale factor cannot (a per-channel std)."""
    if convention_of(record) == PIXELS:
        return 1.0, [0.0, 0.0, 0.0]
    pre = record["preprocess"]
    mean, std = [float(m) for m in pre["mean"]], [float(s) for s in pre["std"]]
    if max(std) - min(std) > STD_TOLERANCE * max(std):
        ckpt = record.get("checkpoint") or "CKPT"
        raise ValueError(f"{Path(path).name}: nvinfer takes one net-scale-factor, but this model's std differs per "
                         f"channel ({', '.join(f'{s:g}' for s in std)}): export the normalisation into the graph, "
                         f"mlit-edge export --checkpoint {ckpt} --raw-input, and export-deepstream that")
    return 1.0 / (255.0 * std[0]), [255.0 * m for m in mean]


def labels_text(classes: Sequence[str], path: str | Path) -> str:
    """The classifier labels file: one line (one output layer), the classes in order separated by ';'."""
    bad = [c for c in classes if ";" in c or "\n" in c or "\r" in c]
    if bad:
        raise ValueError(f"{Path(path).name}: class name {bad[0]!r} holds ';' or a line break, which DeepStream's "
                         "labels file uses to separate classes; rename the class")
    return ";".join(classes) + "\n"


def _batch(record: dict) -> int:
    rec = ArtifactRecord.of(record)
    return rec.batch if isinstance(rec.batch, int) else int(rec.max_batch or 1)


def nvinfer_config(record: dict, model_file: str, path: str | Path) -> str:
    """The `[property]` group of an nvinfer classifier for the artifact `model_file` (beside the config)."""
    scale, offsets = scale_and_offsets(record, path)
    size = record["preprocess"]["size"]
    model_key = "model-engine-file" if model_file.endswith(".plan") else "onnx-file"
    precision = record.get("precision", "fp32")
    lines = [f"# mlit-edge: {Path(path).name}; the input takes {describe(record)}",
             "# the graph outputs logits: classifier-threshold is below any of them; the default parser still attaches "
             "no class when the top logit is <= 0 (its confidence is a logit)",
             "[property]", "gpu-id=0", f"net-scale-factor={scale!r}", "offsets=" + ";".join(repr(o) for o in offsets),
             "model-color-format=0", f"{model_key}={model_file}", f"labelfile-path={LABELS}",
             f"infer-dims=3;{size};{size}", f"batch-size={_batch(record)}", f"network-mode={NETWORK_MODE[precision]}",
             "network-type=1", "process-mode=1", "output-blob-names=logits", f"classifier-threshold={ALWAYS!r}",
             "gie-unique-id=1", "maintain-aspect-ratio=0",
             "# 1: NvBufSurfTransformInter_Bilinear (nvbufsurftransform.h); nearest cost the shipped model 4.4 points",
             "# of top-1 on enlarged digits (benchmarks/deepstream_resize.py, docs/runtime.md)", "scaling-filter=1"]
    if precision == "int8":
        lines.insert(2, "# INT8 is in the graph (Q/DQ, calibrated by mlit-edge): it needs no int8-calib-file")
    return "\n".join(lines) + "\n"


def app_config(uri: str, batch: int) -> str:
    """A minimal deepstream-app config: one file source, the classifier on full frames, a fake sink."""
    return "\n".join([
        "# deepstream-app -c " + APP, "[application]", "enable-perf-measurement=1", "perf-measurement-interval-sec=5",
        "", "[source0]", "enable=1", "type=3", f"uri={uri}", "num-sources=1",
        "", "[streammux]", "live-source=0", f"batch-size={batch}", "width=1280", "height=720",
        "batched-push-timeout=40000",
        "", "[primary-gie]", "enable=1", f"config-file={CONFIG}", "gie-unique-id=1", f"batch-size={batch}",
        "", "[osd]", "enable=1", "display-text=1",
        "", "[sink0]", "enable=1", "type=1", "sync=0", ""])


def write_deepstream(artifact: str | Path, out: str | Path, uri: str = SAMPLE_STREAM) -> Path:
    """`out/` with the artifact, its nvinfer config, labels and a deepstream-app config; everything checked
    before anything is written, then staged in a private folder renamed into place (never over a folder)."""
    artifact, out = Path(artifact), Path(out)
    if artifact.suffix not in (".plan", ".onnx"):
        raise ValueError(f"{artifact.name}: DeepStream runs a .plan (TensorRT) or an .onnx it builds itself")
    if not artifact.is_file():
        raise FileNotFoundError(f"{artifact} does not exist")
    content = artifact.read_bytes()
    record = read_sidecar(artifact, content=content)  # the sha256 of these bytes, or one line
    classifier_fields(record, artifact)
    check_runtime(record, "tensorrt", artifact)  # an ONNX Runtime artifact's fused attention is no TensorRT graph
    io = ArtifactRecord.of(record).engine_io
    inputs = [t for t in (io or {}).get("inputs", []) if isinstance(t, dict)]
    # engine.io names types as TensorRT does ("float", "uint8"): uint8 is all check_graph compares
    name, dtype = (inputs[0].get("name"), inputs[0].get("dtype")) if inputs else _onnx_input(content)
    check_graph(record, name, artifact, dtype)
    if dtype_of(record) == UINT8:
        ckpt = record.get("checkpoint") or "CKPT"
        raise ValueError(f"{artifact.name} takes uint8 input, and nvinfer feeds float32 (its preprocessing writes "
                         f"float into the input binding): export the float32 pixels graph, mlit-edge export "
                         f"--checkpoint {ckpt} --raw-input, and export-deepstream that")
    config = nvinfer_config(record, artifact.name, artifact)
    labels = labels_text(record["classes"], artifact)
    if os.path.lexists(out):
        raise FileExistsError(f"{out} already exists; remove it or pass another --out")
    if not out.parent.is_dir():
        raise FileNotFoundError(f"output folder {out.parent} does not exist")
    staging = Path(tempfile.mkdtemp(prefix=f".{out.name}.", suffix=".partial", dir=out.parent))
    try:
        (staging / artifact.name).write_bytes(content)  # the very bytes that were checked
        shutil.copyfile(f"{artifact}.json", staging / f"{artifact.name}.json")
        (staging / CONFIG).write_text(config)
        (staging / LABELS).write_text(labels, encoding="utf-8")
        (staging / APP).write_text(app_config(uri, _batch(record)))
        os.chmod(staging, 0o755)
        staging.rename(out)  # whole or not at all
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return out


def _onnx_input(content: bytes) -> tuple[str | None, str | None]:
    """The first graph input's name and numpy dtype, (None, None) without onnx (the runtime floor may lack it)."""
    try:
        import onnx
    except ImportError:
        return None, None
    from .input_convention import graph_input

    return graph_input(onnx.load_from_string(content))


__all__ = ["NORMALISED", "PIXELS", "scale_and_offsets", "labels_text", "nvinfer_config", "app_config",
           "write_deepstream"]
