"""Commands that run inference on artifacts: bench (the workstation), predict and serve (the torch-free runtime)."""
from __future__ import annotations

import json
import os
import re
import sys

import click

from ..artifacts.schema import recorded
from ..base.messages import printable
from ..bench.options import BenchConfig, provider_csv, provider_names
from ..model.budget import check_batch_fits
from ..runtime import predict_files, watch
from ..runtime.images import DEFAULT_MAX_PIXELS
from ..runtime.inbox import say
from ..runtime.serve import RETRY_S, SETTLE_S
from ..runtime.stream_options import StreamOptions
from .common import FiniteFloat, checked, default, int_list, thread_count, user_errors

MAX_PIXELS = click.option("--max-pixels", default=DEFAULT_MAX_PIXELS, show_default=True, type=click.IntRange(min=1),
                          help="Refuse, per file and before decoding, images with more pixels than this.")


@click.command()
@click.argument("artifacts", nargs=-1, required=True, type=click.Path(dir_okay=False))
@click.option("--reference", default=None, type=click.Path(dir_okay=False),
              help="PyTorch checkpoint to compare against [default: a .pt among ARTIFACTS, else the sidecar's].")
@click.option("--data", default=None, help="Dataset name or ImageFolder path [default: the model's dataset].")
@click.option("--split", default=default(BenchConfig, "split"), show_default=True)
@click.option("--limit", default=None, type=checked(BenchConfig, "limit"), help="Use only the first N images.")
@click.option("--data-root", default=default(BenchConfig, "data_root"), show_default=True,
              type=click.Path(file_okay=False))
@click.option("--batch", "batches", default=",".join(map(str, default(BenchConfig, "batches"))), show_default=True,
              callback=int_list, help="Comma-separated batch sizes to time.")
@click.option("--warmup-ms", default=default(BenchConfig, "warmup_ms"), show_default=True,
              type=checked(BenchConfig, "warmup_ms"))
@click.option("--warmup-iters", default=default(BenchConfig, "warmup_iters"), show_default=True,
              type=checked(BenchConfig, "warmup_iters"))
@click.option("--duration", "duration_s", default=default(BenchConfig, "duration_s"), show_default=True,
              type=checked(BenchConfig, "duration_s"), help="Seconds of timed calls per artifact and batch.")
@click.option("--iterations", default=None, type=checked(BenchConfig, "iterations"),
              help="Time exactly N calls instead.")
@click.option("--threads", default=None, type=thread_count(),
              help="CPU threads (ONNX Runtime, torch), at most 8 per core of this machine.")
@click.option("--ort-providers", "providers", default=provider_csv(default(BenchConfig, "providers")),
              show_default=True,
              help="ONNX Runtime execution providers in order: cpu, cuda, tensorrt (where installed).")
@click.option("--cuda-graph", is_flag=True, help="TensorRT: replay each batch as a captured CUDA graph.")
@click.option("--ort-arena/--no-ort-arena", default=default(BenchConfig, "ort_arena"), show_default=True,
              help="ONNX Runtime's CPU memory arena. It keeps what the largest batch needed; --no-ort-arena "
                   "returns memory after each call, for some latency on large batches.")
@click.option("--isolate/--in-process", default=default(BenchConfig, "isolate"), show_default=True,
              help="Bench each artifact in its own fresh process, so its memory figures are its own; "
                   "--in-process is faster to start but lets later artifacts reuse memory freed by earlier ones.")
@click.option("--json", "json_path", default=None, type=click.Path(dir_okay=False),
              help="Write the full report (with per-call samples) here.")
@click.option("--plot", "plot_dir", default=None, type=click.Path(file_okay=False),
              help="Write latency.png and accuracy_latency.png here.")
@user_errors
def bench(artifacts, providers, iterations, duration_s, json_path, plot_dir, **kw) -> None:
    """Latency, memory, accuracy and fidelity of .plan/.onnx/.xml/.pt artifacts against the PyTorch reference.

    \b
    Example:
      mlit-edge bench artifacts/*.onnx runs/x/checkpoint.pt --batch 1,8
    """
    from ..bench.report import format_bench
    from ..bench.suite import bench_and_save, failures

    cfg = BenchConfig(providers=provider_names(providers), iterations=iterations,
                      duration_s=None if iterations else duration_s, **kw)
    report = bench_and_save(list(artifacts), cfg, json_path, plot_dir)
    click.echo(format_bench(report))
    if failures(report):  # the table and the report hold the rest; the exit status says not all were benched
        raise click.ClickException(failures(report))


@click.command()
@click.argument("images", nargs=-1, required=True, type=click.Path())
@click.option("--model", "model_path", required=True, type=click.Path(dir_okay=False),
              help="A .plan (TensorRT), .onnx (ONNX Runtime) or .xml (OpenVINO) built by mlit-edge, with its .json "
                   "sidecar.")
@click.option("--top-k", default=1, show_default=True, type=click.IntRange(min=1))
@click.option("--json", "as_json", is_flag=True,
              help="Print a JSON list, one object per image (Prediction.to_dict(): path, class_id, name, prob, top, "
                   "top5, times_ms ...; an unreadable one: path and error).")
@MAX_PIXELS
@click.option("--force", is_flag=True, help="Run a plan built on another Jetson module of the same GPU (AGX Orin, "
                                            "Orin NX and Orin Nano are all sm_87); it says so.")
@user_errors
def predict(images, model_path, top_k, as_json, max_pixels, force) -> None:
    """Classify image files with the embedded runtime (no torch). IMAGES are files, folders (the images
    directly inside, sorted by name) and globs (quoted: 'imgs/*.png'). Unreadable files, folders without
    images and globs that match nothing get an error entry and the rest are still classified; the exit code
    is 2 when any failed. Video files, cameras and streams go to mlit-edge stream.

    \b
    Example:
      mlit-edge predict digits/ 'more/*.png' --model mlit-xxs-fp32-ort.onnx --top-k 3 --json
    """
    results = predict_files(model_path, images, top_k, max_pixels, force)
    if as_json:
        click.echo(json.dumps(results, indent=1))
    else:
        for r in results:  # names and paths escaped: a class name could set the terminal's title
            if "error" in r:
                click.echo(f"{printable(r['path'])}: ERROR {printable(r['error'])}")
            else:
                top = ", ".join(f"{printable(name)} {p:.3f}" for _, name, p in r["top"])
                click.echo(f"{printable(r['path'])}: {top}")
    if any("error" in r for r in results):
        sys.exit(2)


@click.command()
@click.option("--model", "model_path", required=True, type=click.Path(dir_okay=False))
@click.option("--inbox", required=True, type=click.Path(file_okay=False), help="Folder to watch for images.")
@click.option("--results", required=True, type=click.Path(dir_okay=False), help="JSON-lines file to append to.")
@click.option("--interval", default=0.5, show_default=True, type=FiniteFloat(min=0.01),
              help="Seconds between polls of an empty inbox.")
@click.option("--settle", "settle_s", default=SETTLE_S, show_default=True, type=FiniteFloat(min=0),
              help="Read a file only once its size and time have held still this long.")
@click.option("--retry", "retry_s", default=RETRY_S, show_default=True, type=FiniteFloat(min=0),
              help="Retry a file that does not decode until it has held still this long, then fail it.")
@MAX_PIXELS
@user_errors
def serve(model_path, inbox, results, **kw) -> None:
    """Always-on loop for a device: classify each image dropped into --inbox, append a JSON line to
    --results, move the image to inbox/done or inbox/failed. Runs until stopped (systemd unit in deploy/).

    \b
    Drop files safely: write them under a name that starts with "." (or ends in .tmp / .part) and
    rename them into the inbox; a file is read only after it has held still for --settle seconds.
    """
    say(f"serving {model_path}: watching {inbox}, results -> {results}")  # dropped, not fatal, on a full log disk
    watch(model_path, inbox, results, interval_s=kw.pop("interval"), **kw)


def check_stream_batch(model_path: str, batch: int | None) -> None:
    """Refuse a `stream --batch` whose buffers cannot fit this machine, before any frame is read, as `build
    --batch` is refused (model.budget, from the model's record). An artifact whose sidecar does not read is
    left to the loader, which says why in its own line."""
    from ..model.records import record_config

    if batch is None:
        return
    try:
        config = recorded(model_path, verify_hash=False).config
    except (ValueError, OSError, TypeError, KeyError, AttributeError):
        return
    check_batch_fits(record_config(config), batch)


@click.command()
@click.argument("source")
@click.argument("output", required=False, type=click.Path(dir_okay=False))
@click.option("--model", "model_path", required=True, type=click.Path(dir_okay=False),
              help="A .plan (TensorRT), .onnx (ONNX Runtime) or .xml (OpenVINO) built by mlit-edge, with its .json "
                   "sidecar.")
@click.option("--results", default=None, type=click.Path(dir_okay=False),
              help="Append the JSON lines to this file instead of printing them.")
@click.option("--every", default=default(StreamOptions, "every"), show_default=True, type=click.IntRange(min=1),
              help="Classify one frame in N.")
@click.option("--batch", default=default(StreamOptions, "batch"), type=click.IntRange(min=1),
              help="Frames per call for a file [default: a static-batch engine's batch, else 1]; live sources "
                   "always classify their newest frame alone.")
@click.option("--top-k", default=default(StreamOptions, "top_k"), show_default=True, type=click.IntRange(min=1))
@click.option("--status-every", "status_s", default=default(StreamOptions, "status_s"), show_default=True,
              type=FiniteFloat(min=0), help="Seconds between status lines on stderr (0: only the last).")
@click.option("--max-frames", default=default(StreamOptions, "max_frames"), type=click.IntRange(min=1),
              help="Stop after N classified frames.")
@click.option("--camera", default="{}x{}@{}".format(*default(StreamOptions, "camera")), show_default=True,
              help="A CSI camera's mode, WIDTHxHEIGHT@FPS.")
@click.option("--max-pixels", default=default(StreamOptions, "max_pixels"), show_default=True,
              type=click.IntRange(min=1),
              help="Skip (and count as corrupt) frames with more pixels than this; a file whose stated frame size "
                   "is larger is refused.")
@user_errors
def stream(source, output, model_path, results, camera, **kw) -> None:
    """Classify the frames of a video file, a camera or a stream (the embedded runtime, no torch).

    \b
    SOURCE: a video file (.mp4 .mkv .avi ...), a V4L2 camera (/dev/video0, v4l2:///dev/video0), a Jetson
    CSI camera (csi://0), a stream (rtsp://host:554/path, http://...), or a GStreamer pipeline
    (anything with " ! ", or gst://...). OUTPUT: an annotated video (.mp4 or .avi).
    Prints one JSON line per classified frame: frame, t (source seconds), class, class_id, prob, latency_ms.
    A file gives every frame (undecodable ones are skipped and counted); a live source gives its newest
    frame, counts the ones it dropped, and reconnects when it stalls. Ctrl-C ends it cleanly.
    OUTPUT and --results are refused when either is the source, the model, its sidecar or the other.

    \b
    Examples:
      mlit-edge stream clip.mp4 annotated.mp4 --model mlit-xxs-fp16.plan
      mlit-edge stream csi://0 --model mlit-xxs-fp16.plan --every 2
    """
    from ..runtime.stream import run_stream

    mode = re.fullmatch(r"(\d+)x(\d+)@(\d+)", camera)
    if not mode:
        raise click.BadParameter(f"{camera!r}: expected WIDTHxHEIGHT@FPS, e.g. 1280x720@30", param_hint="--camera")
    opts = StreamOptions(output=output, results=results, camera=tuple(int(v) for v in mode.groups()), **kw)
    check_stream_batch(model_path, opts.batch)
    summary = run_stream(model_path, source, opts)  # it opens --results, once it is known not to be an input
    code = 128 + summary["signal"] if summary.get("signal") else 0
    if summary.get("stalled_at_close"):
        # a thread is still inside OpenCV's read(): leaving through the interpreter's finalisation would run
        # under it (an abort when the read returns then), so flush what was written and end the process now
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    if code:
        sys.exit(code)
