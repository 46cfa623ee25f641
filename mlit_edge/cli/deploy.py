"""Commands of the export and engine stages: export, build, check."""
from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

import click

from ..export import FRONTENDS, PRECISIONS, TARGETS
from ..export.requests import BuildRequest, ExportOptions, ExportRequest
from ..runtime.artifact import BATCH_PROFILE
from ..devices.profiles import JETPACKS, TENSORRTS, named_profile
from .common import OPSET, batch_triple, check_size, checked, default, user_errors
from ..export.calibration import default_cache_dir
from ..base.messages import require_file

RANDOM = click.option("--random-weights", is_flag=True,
                      help="Without --checkpoint: random weights even where a pretrained model ships (latency work).")
FORCE = click.option("--force", is_flag=True, help="Replace artifacts in the output folder that were built from "
                                                   "another checkpoint or from random weights.")


def _export_options(fn):
    """The options `export` and `build` share (`export.requests.ExportOptions`), with its defaults."""
    opts = [
        click.option("--checkpoint", type=click.Path(dir_okay=False), default=None,
                     help="A trained mLiT checkpoint, or pretrained:NAME (mlit-edge pretrained lists them) "
                          "[default: the size's pretrained model where one ships, else random weights]."),
        click.option("--num-classes", default=default(ExportOptions, "num_classes"), show_default=True,
                     type=checked(ExportOptions, "num_classes"), help="Head size for random weights."),
        OPSET,
        click.option("--jetpack", default=None, type=click.Choice(JETPACKS),
                     help="The Jetson's JetPack: the graph and the engine follow its TensorRT (5.1: 8.5, opset 17, "
                          "LayerNorm decomposed, weakly typed; 6.0: 8.6, opset 17, weakly typed; 6.1/6.2: 10.3 and "
                          "7: 10.13, strongly typed) [default: TensorRT 10; on a device, its installed TensorRT]."),
        click.option("--tensorrt", default=None, type=click.Choice(sorted(TENSORRTS)),
                     help="The same as --jetpack, named by JetPack's TensorRT version."),
        click.option("--pad-heads", default=default(ExportOptions, "pad_heads"), show_default=True,
                     metavar="auto|off|N",
                     help="Zero-pad each attention head's Q, K and V to a head size TensorRT's fused attention "
                          "takes (FP16: 16-256, a multiple of 8); exact, the scale stays 1/sqrt(head size). auto: "
                          "pads 18 to 24 (mLiT-S, XXS) for TensorRT 10.3-10.13 (JetPack 6.1-7, and the desktop "
                          "TensorRT 10 default), not for TensorRT 8.5/8.6 (JetPack 5.1/6.0: predicted not to fuse), "
                          "an INT8-only build, or ONNX Runtime (measured no faster). N: pad to N."),
        click.option("--raw-input", is_flag=True,
                     help="Fold the mean, std and 1/255 into the patch embedding (exact: the patch convolution has "
                          "no padding): the graph takes RGB pixels 0-255 as float32 (N, 3, S, S), input 'pixels', so a "
                          "client only resizes. For DeepStream (nvinfer cannot express a per-channel std), Triton and "
                          "any client without mlit-edge's preprocessing."),
        click.option("--input-dtype", default=default(ExportOptions, "input_dtype"), show_default=True,
                     type=click.Choice(["float32", "uint8"]),
                     help="With --raw-input: uint8 makes the input uint8, read by a Cast to float32 inside the "
                          "graph (exact; a quarter of the bytes to copy). TensorRT takes it from 8.5 (every "
                          "--jetpack here), ONNX Runtime and Triton too; DeepStream's nvinfer feeds float32 only."),
        click.option("--calib-data", default=None,
                     help="INT8 calibration: a dataset name, an ImageFolder path, or a recipe JSON "
                          "(calibration/*.json) [default: the checkpoint's dataset, else mnist5k]."),
        click.option("--calib-n", default=default(ExportOptions, "calib_n"), show_default=True,
                     type=checked(ExportOptions, "calib_n"), help="Calibration images, stratified over the classes."),
        click.option("--data-root", default=default(ExportOptions, "data_root"), show_default=True,
                     type=click.Path(file_okay=False)),
        FORCE, RANDOM,
        click.option("--progress/--no-progress", default=default(ExportOptions, "progress"),
                     help="Show the long steps' progress on stderr: a bar on a terminal, else a line every 5 s."),
    ]
    for opt in reversed(opts):
        fn = opt(fn)
    return fn


@click.command()
@click.option("--size", default=None, callback=check_size,
              help="Model size without --checkpoint: s, xs or xxs (its pretrained model where one ships).")
@click.option("--out", "out", default=default(ExportRequest, "out"), show_default=True,
              type=click.Path(), help="The fp32 ONNX, variants beside it as NAME-fp16.onnx and NAME-int8.onnx; or a "
                                      "folder (created if missing), the files named as build names them.")
@click.option("--batch", default=None, type=checked(ExportRequest, "batch"),
              help="Fix the batch size [default: dynamic batch].")
@click.option("--probe", is_flag=True, help="Also output each layer's top-k expert indices (routing checks).")
@click.option("--precision", "precisions", default=",".join(default(ExportRequest, "precisions")),
              show_default=True, callback=lambda ctx, param, v: tuple(p.strip() for p in v.split(",") if p.strip()),
              help=f"Comma-separated: {', '.join(PRECISIONS)}.")
@_export_options
@user_errors
def export(**kw) -> None:
    """Export to ONNX through `to_deploy` (static-shape MoE), check it against PyTorch, make fp16/INT8 variants.

    Each .onnx gets a .onnx.json sidecar with its provenance; stdout lists their paths, one per precision.
    """
    from ..export.pipeline import run_export

    click.echo("\n".join(map(str, run_export(ExportRequest(**kw)))))


@click.command()
@click.option("--size", default=None, callback=check_size, help="Model size s, xs or xxs [default: the checkpoint's, "
                                                           "else xxs].")
@click.option("--precision", default=default(BuildRequest, "precision"), show_default=True,
              type=click.Choice(PRECISIONS),
              help="Carried by the ONNX: fp16 casts (norms, softmax, router, head stay fp32; a GPU format, "
                   "no faster than fp32 on a CPU) or INT8: Q/DQ in TensorRT's recipe for a TensorRT target, "
                   "static integer matmuls for ONNX Runtime (NAME-int8-ort.onnx) for --target onnxruntime; both "
                   "calibrated (--calib-data), so an image's answer does not depend on its batch.")
@click.option("--onnx", type=click.Path(dir_okay=False), default=None,
              help="Build from an exported ONNX (e.g. calibrated on the workstation, copied to the device).")
@click.option("--target", default=default(BuildRequest, "target"), show_default=True, type=click.Choice(TARGETS),
              help="auto: TensorRT where it imports, else the ONNX for ONNX Runtime. onnxruntime's fp32 and INT8 "
                   "(NAME-fp32-ort.onnx, NAME-int8-ort.onnx) hold its fused attention kernel (opset 23, ONNX "
                   "Runtime 1.23 or newer), which TensorRT refuses; fp16 stays the portable graph. openvino: an "
                   "OpenVINO IR (NAME-PRECISION.xml + .bin) of that fused graph; its fp16 computes in bf16 where the "
                   "CPU has it (pip install 'mlit-edge[openvino]').")
@click.option("--frontend", default=default(BuildRequest, "frontend"), show_default=True,
              type=click.Choice(FRONTENDS),
              help="torch-tensorrt compiles to_deploy(model) with torch-tensorrt (CUDA workstations, fp32/fp16).")
@click.option("--batch", default=None, type=checked(BuildRequest, "batch"),
              help="A static batch size (static shapes everywhere, CUDA-graph friendly).")
@click.option("--dynamic-batch", default=None, callback=batch_triple,
              help=f"MIN,OPT,MAX of the engine's batch profile [default: {','.join(map(str, BATCH_PROFILE))}].")
@click.option("--workspace", default=default(BuildRequest, "workspace"), show_default=True,
              type=checked(BuildRequest, "workspace"), help="Builder memory-pool limit in GiB.")
@click.option("--timing-cache", default=None, type=click.Path(dir_okay=False),
              help="TensorRT timing cache: read if it exists, written after the build.")
@click.option("--dla-core", default=None, type=checked(BuildRequest, "dla_core"),
              help="Run on this DLA core with GPU fallback (Jetson Orin/Xavier).")
@click.option("--calib-seed", default=default(BuildRequest, "calib_seed"), show_default=True,
              type=checked(BuildRequest, "calib_seed"))
@click.option("--calib-cache", default=None, type=click.Path(file_okay=False),
              help="Calibration cache folder [default: ~/.cache/mlit-edge/calibration].")
@click.option("--no-calib-cache", is_flag=True, help="Always recalibrate.")
@click.option("--min-expert-tokens", default=default(BuildRequest, "min_expert_tokens"), show_default=True,
              type=checked(BuildRequest, "min_expert_tokens"),
              help="Warn when an expert gets fewer calibration tokens than this.")
@click.option("--out", default=default(BuildRequest, "out"), show_default=True, type=click.Path(file_okay=False),
              help="Output folder for the .onnx/.plan files and their .json sidecars.")
@click.option("--eval/--no-eval", "evaluate", default=default(BuildRequest, "evaluate"),
              help="Measure top-1 on the held-out split (default).")
@click.option("--json", "as_json", is_flag=True, help="Print the artifact's sidecar as JSON at the end.")
@_export_options
@user_errors
def build(calib_cache, no_calib_cache, as_json, **kw) -> None:
    """Build a deployable artifact: a TensorRT .plan, or the ONNX for ONNX Runtime where TensorRT is absent.

    \b
    Examples:
      mlit-edge build --size xxs --precision fp16                  # the shipped pretrained mLiT-XXS
      mlit-edge build --checkpoint runs/x/checkpoint.pt --precision int8 --target tensorrt-rtx
      mlit-edge build --onnx mlit-xxs-int8.onnx --target tensorrt  # on the Jetson

    Every artifact gets a .json sidecar: versions, device, flags, hashes, preprocessing, classes.
    """
    from ..engine.build import run_build

    cache = None if no_calib_cache else (calib_cache or str(default_cache_dir()))
    req = BuildRequest(calib_cache=cache, **kw)
    result = run_build(req)
    click.echo(json.dumps({"artifact": str(result.artifact), "target": result.target, "record": result.record.to_json(),
                           "coverage": result.coverage}, indent=2) if as_json else str(result.artifact))


@click.command("check")
@click.argument("onnx_path", type=click.Path(dir_okay=False))
@click.option("--no-build", is_flag=True, help="Static checks only, even where TensorRT is installed.")
@click.option("--jetpack", default=None, type=click.Choice(JETPACKS),
              help="Check the ops and opset against that JetPack's TensorRT operator table (onnx-tensorrt's "
                   "docs/operators.md on its branch) [default: the profile the graph's own sidecar records, "
                   "else TensorRT 10's opsets].")
@click.option("--tensorrt", default=None, type=click.Choice(sorted(TENSORRTS)), help="The same, by TensorRT version.")
@click.option("--json", "as_json", is_flag=True)
@user_errors
def check_cmd(onnx_path: str, no_build: bool, jetpack: str | None, tensorrt: str | None, as_json: bool) -> None:
    """TensorRT compatibility report: denied ops, static shapes, TopK limits, and a real TensorRT(-RTX)
    parse and strongly typed engine build where one is installed. Without --jetpack, the profile the graph's own
    sidecar records (when its sha256 matches). Not buildable: the whole report, then one error line naming its
    first FAIL, and exit status 1."""
    from ..engine.check import check, format_report

    require_file(onnx_path)  # a device or FIFO is said as such, before anything opens it (which could block)
    rep = check(onnx_path, build=not no_build, profile=named_profile(jetpack, tensorrt))
    click.echo(json.dumps({**asdict(rep), "ok": rep.ok}, indent=2) if as_json else format_report(rep))
    if not rep.ok:  # the report says every reason; the one error line (rc 1) names the first
        b = rep.build or {}
        first = rep.problems[0] if rep.problems else \
            f"{b.get('module')} {b.get('stage')} failed: {(b.get('errors') or ['no error given'])[0]}"
        raise ValueError(f"{Path(onnx_path).name} is not TensorRT-buildable: {first}"
                         + (f" (and {len(rep.problems) - 1} more FAIL lines)" if len(rep.problems) > 1 else ""))


@click.command("export-triton")
@click.argument("artifact", type=click.Path(dir_okay=False))
@click.option("--repo", required=True, type=click.Path(file_okay=False),
              help="The Triton model repository (created if missing); the model goes in REPO/NAME.")
@click.option("--name", default=None, help="The model's name in Triton [default: the artifact's, e.g. mlit-xxs-fp16].")
@click.option("--kind", default="gpu", show_default=True, type=click.Choice(["gpu", "cpu"]),  # triton_config.KINDS
              help="Where Triton runs it. gpu: KIND_GPU; an .onnx also gets ONNX Runtime's TensorRT accelerator, "
                   "precision_mode from its precision (FP32, FP16, INT8 for TensorRT's Q/DQ graph), engines cached "
                   "(an -ort graph, made for ONNX Runtime's CPU kernels, is refused: pass cpu). cpu: KIND_CPU, no "
                   "accelerator (an .onnx only: a plan runs on the GPU alone).")
@click.option("--engine-cache", default=None, metavar="DIR",
              help="With an .onnx and --kind gpu: an existing folder on the serving machine, absolute as tritonserver "
                   "sees it, under which the TensorRT accelerator keeps this artifact's engines across restarts, in "
                   "mlit-edge-NAME-SHA (SHA: the artifact's sha256; ONNX Runtime's own cache key ignores the weights) "
                   "[default: /tmp (triton_config.DEFAULT_ENGINE_CACHE): any user may write it, cleared at boot; "
                   "give a folder only Triton's user writes to keep engines across reboots].")
@click.option("--probabilities", is_flag=True,
              help="Serve an .onnx whose output is probabilities: the graph with a Softmax over its logits appended, "
                   "in float32 (the classification extension's scores are then probabilities).")
@user_errors
def export_triton(artifact: str, repo: str, name: str | None, kind: str, engine_cache: str | None,
                  probabilities: bool) -> None:
    """A Triton Inference Server model folder for a .plan or .onnx artifact: REPO/NAME/config.pbtxt (platform,
    batch, input and output names, types and dims from the artifact itself, instance kind and accelerator from
    --kind, checked against Triton's documented rules), REPO/NAME/1/model.plan or model.onnx, and the sidecar as
    REPO/NAME/mlit-edge.json.

    \b
    Then, on the device (JetPack's Triton build; not run on the project's machines):
      tritonserver --model-repository REPO
    """
    from ..stacks.triton import write_repository

    click.echo(str(write_repository(artifact, repo, name, warn=lambda line: click.echo(f"warning: {line}", err=True),
                                    kind=kind, engine_cache=engine_cache, probabilities=probabilities)))


@click.command("export-deepstream")
@click.argument("artifact", type=click.Path(dir_okay=False))
@click.option("--out", required=True, type=click.Path(file_okay=False),
              help="The folder to write (must not exist): the model (an .onnx becomes NAME-probabilities.onnx), "
                   "config_infer_mlit.txt, labels.txt and deepstream_app_config.txt.")
@click.option("--uri", default=None, help="The deepstream-app config's file source [default: DeepStream's "
                                          "samples/streams/sample_720p.mp4].")
@click.option("--batch", default=1, show_default=True, type=int,
              help="Sources batched per inference: the deepstream-app config reads --uri this many times, and "
                   "streammux, primary-gie and nvinfer batch that many frames (1 to 1024; a graph exported with a "
                   "fixed batch must have batch 1: nvinfer builds with a batch profile from 1). With --secondary: "
                   "streammux and the detector; the classifier batches --secondary-batch objects.")
@click.option("--threshold", default=0.0, show_default=True, type=float,
              help="nvinfer's classifier-threshold, a probability from 0 to 1: the top class is attached when its "
                   "probability is above it (0: always).")
@click.option("--secondary", is_flag=True,
              help="Secondary GIE (process-mode=2): classify the objects a detector found, each crop scaled to the "
                   "model's input, as deepstream-test2's classifiers do; the deepstream-app config runs "
                   "--primary-config as [primary-gie] and this model as [secondary-gie0] (gie-unique-id: the "
                   "detector's + 1).")
@click.option("--primary-config", default=None, metavar="PATH",
              help="With --secondary: the detector's nvinfer config on the Jetson, absolute or relative to OUT "
                   "(deepstream-app resolves it against its config's folder) [default: DeepStream's sample ResNet-10 "
                   "detector, /opt/nvidia/deepstream/deepstream/samples/configs/deepstream-app/"
                   "config_infer_primary.txt: 0 car, 1 bicycle, 2 person, 3 roadsign].")
@click.option("--operate-on-gie-id", default=None, type=int, metavar="N",
              help="With --secondary: the detector's gie-unique-id, set on [primary-gie] too [default: 1].")
@click.option("--operate-on-class-ids", default=None, metavar="IDS",
              help="With --secondary: the detector's classes to classify, e.g. '0;2' [default: all].")
@click.option("--min-object-size", default=None, metavar="WxH",
              help="With --secondary: input-object-min-width/height, objects smaller are not classified (16 or "
                   "more: nvinfer never classifies under 16x16) [default: none, so nvinfer's 16x16].")
@click.option("--async/--no-async", "async_mode", default=None,
              help="With --secondary: classifier-async-mode; async classifies tracked objects only, so a [tracker] "
                   "(deepstream-test2's) is written [default: async, as deepstream-test2].")
@click.option("--secondary-batch", default=None, type=int, metavar="M",
              help="With --secondary: objects the classifier batches (1 to 1024) [default: 16, as deepstream-test2].")
@user_errors
def export_deepstream(artifact: str, out: str, uri: str | None, batch: int, threshold: float, secondary: bool,
                      **options) -> None:
    """DeepStream files for an .onnx artifact (or a .plan that already outputs probabilities): a copy of the
    graph ending in Softmax (one float32 'probabilities' output), an nvinfer classifier config (network-type=1,
    infer-dims, batch-size, network-mode from the precision, RGB, net-scale-factor and offsets from the recorded
    mean and std, the engine nvinfer caches named as model-engine-file), the labels file, and a deepstream-app
    config on a file source. Every file is checked against DeepStream's own parsing rules (DeepStream 6.2's
    sources) before the folder is written; a file that would fail is refused in one line.

    \b
    nvinfer takes one net-scale-factor: a model whose std differs per channel is refused with the fix,
    an export with --raw-input (the normalisation inside the graph; then 1 and 0).
    --secondary: nvinfer classifies the detector's objects (process-mode=2), the app config runs the
    detector as [primary-gie] and the classifier as [secondary-gie0] (deepstream-test2's settings).
    Then, on the Jetson (not run on the project's machines; docs/deepstream.md):
      cd OUT && deepstream-app -c deepstream_app_config.txt
    """
    from ..stacks.deepstream import SAMPLE_STREAM, write_deepstream
    from ..stacks.deepstream_app import Secondary, parse_class_ids, parse_size

    given = [f"--{k.replace('_', '-')}" for k, v in options.items() if v is not None]
    if given and not secondary:
        raise ValueError(f"{', '.join(given)}: only with --secondary")
    sec = None
    if secondary:  # an option not given keeps Secondary's default (deepstream-test2's)
        ids, size = options["operate_on_class_ids"], options["min_object_size"]
        kw = {"class_ids": parse_class_ids(ids) if ids is not None else None,
              "min_size": parse_size(size) if size is not None else None, "batch": options["secondary_batch"],
              "operate_on_gie_id": options["operate_on_gie_id"], "async_mode": options["async_mode"],
              "primary_config": options["primary_config"]}
        sec = Secondary(**{k: v for k, v in kw.items() if v is not None})
    uri = SAMPLE_STREAM if uri is None else uri  # --uri '' is refused, not taken for the sample stream
    click.echo(str(write_deepstream(artifact, out, uri, batch=batch, threshold=threshold, secondary=sec)))


# what the command line registers from this stage: a new deploy format (stacks/) is its command here and nothing more
COMMANDS = (export, build, check_cmd, export_triton, export_deepstream)
