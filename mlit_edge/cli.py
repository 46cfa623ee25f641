"""The `mlit-edge` command line. Bad input ends in a one-line error and a non-zero exit."""
from __future__ import annotations

import dataclasses
import json
import sys
import typing
from functools import wraps

import click

from . import __version__
from .config import SIZES, MLiTConfig

USER_ERRORS = (ValueError, KeyError, OSError, RuntimeError, TypeError, ArithmeticError)
TRAINING = ("train", "pretrain", "finetune")  # commands that checkpoint every epoch


def _size(ctx: click.Context, param: click.Parameter, value: str) -> str:
    if value.lower() not in SIZES:
        raise click.ClickException(f"unknown model size {value!r}; valid sizes: {', '.join(SIZES)}")
    return value.lower()


def _parse_overrides(ctx: click.Context, param: click.Parameter, values: tuple[str, ...]) -> dict:
    """--set KEY=VALUE for MLiTConfig fields, converted to the field's type."""
    hints = typing.get_type_hints(MLiTConfig)
    out = {}
    for item in values:
        key, sep, raw = item.partition("=")
        if not sep or key not in hints:
            fields = ", ".join(f.name for f in dataclasses.fields(MLiTConfig))
            raise click.ClickException(f"--set {item!r}: expected KEY=VALUE with KEY one of: {fields}")
        kind = hints[key]
        try:
            if kind is bool:
                value = raw.lower() in ("1", "true", "yes", "on")
            elif typing.get_origin(kind) is tuple:
                elem = typing.get_args(kind)[0]
                value = tuple(elem(v) for v in raw.split(",") if v)
            else:
                value = kind(raw)
        except ValueError:
            raise click.ClickException(f"--set {item!r}: {raw!r} is not a valid {getattr(kind, '__name__', kind)}")
        out[key] = value
    return out


def user_errors(fn):
    """Turn expected failures (bad paths, bad values, refused checkpoints) into one-line errors."""
    @wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except USER_ERRORS as e:
            msg = e.args[0] if isinstance(e, KeyError) and e.args else str(e)
            raise click.ClickException(str(msg).splitlines()[0] if msg else type(e).__name__) from None
        except KeyboardInterrupt:
            click.echo("interrupted; the last completed epoch's checkpoint is intact (use --resume)"
                       if fn.__name__ in TRAINING else "interrupted", err=True)
            sys.exit(130)
    return wrapper


SIZE = click.option("--size", default="xxs", show_default=True, callback=_size,
                    help=f"Model size, one of: {', '.join(SIZES)}.")


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="mlit-edge")
def main() -> None:
    """mlit-edge: train, convert, build and benchmark mLiT vision transformers for edge GPUs."""


@main.command()
@SIZE
@click.option("--num-classes", default=100, show_default=True, type=click.IntRange(min=1),
              help="Classes of the head (the paper's counts use 100).")
@click.option("--json", "as_json", is_flag=True, help="Print the table as JSON instead of text.")
def info(size: str, num_classes: int, as_json: bool) -> None:
    """Per-layer table of a model size: hidden size, experts, parameters and MACs, with totals.

    Also shows how the reconstructed size compares with the paper's parameter count.
    """
    from .config import get_config
    from .info import format_table, model_stats, paper_comparison

    cfg = get_config(size, num_classes=num_classes)
    stats = model_stats(cfg)
    paper = paper_comparison(size, cfg)
    if as_json:
        click.echo(json.dumps({"size": size, **stats, "paper": paper}, indent=2))
    else:
        click.echo(format_table(size, stats, paper))


def training_options(fn):
    """Options shared by train, pretrain and finetune."""
    opts = [
        click.option("--data", default="mnist5k", show_default=True,
                     help="mnist5k (embedded, no network), cifar10, cifar100, svhn, flowers102, or an "
                          "ImageFolder directory."),
        click.option("--data-root", default="data", show_default=True, type=click.Path(file_okay=False),
                     help="Where torchvision datasets live (or are downloaded to)."),
        click.option("--download", is_flag=True, help="Download a torchvision dataset if it is missing."),
        click.option("--epochs", default=30, show_default=True, type=click.IntRange(min=1)),
        click.option("--batch-size", default=128, show_default=True, type=click.IntRange(min=1),
                     help="Global batch size, split across torchrun processes."),
        click.option("--lr", type=click.FloatRange(min=0, min_open=True), default=None,
                     help="Peak learning rate [default: 3e-4 * batch / 256, the paper's rule]."),
        click.option("--min-lr", default=0.0, show_default=True, type=click.FloatRange(min=0)),
        click.option("--warmup-frac", default=0.05, show_default=True, type=click.FloatRange(0, 1),
                     help="Fraction of training spent in linear warm-up."),
        click.option("--weight-decay", default=0.05, show_default=True, type=click.FloatRange(min=0)),
        click.option("--clip-grad", default=None, type=click.FloatRange(min=0, min_open=True),
                     help="Clip the gradient norm to this value."),
        click.option("--amp", default="auto", show_default=True, type=click.Choice(["auto", "fp16", "bf16", "off"]),
                     help="Mixed precision: auto is fp16 with a GradScaler on CUDA and fp32 on CPU."),
        click.option("--device", default="auto", show_default=True, help="auto, cpu, cuda or cuda:N."),
        click.option("--seed", default=0, show_default=True, type=int),
        click.option("--deterministic", is_flag=True, help="Use deterministic kernels (bitwise repeatable on CPU)."),
        click.option("--resident", is_flag=True,
                     help="Keep the whole dataset on the device and augment it there (fast GPU path)."),
        click.option("--compile", "compile_", is_flag=True, help="torch.compile the model (slow start, faster steps)."),
        click.option("--out", default=None, type=click.Path(file_okay=False),
                     help="Run folder for checkpoint.pt, metrics.jsonl and the PNGs [default: runs/TASK-SIZE-DATA]."),
        click.option("--resume", is_flag=True, help="Continue the run in --out from its checkpoint."),
        click.option("--set", "overrides", multiple=True, callback=_parse_overrides, metavar="KEY=VALUE",
                     help="Override a model config field, e.g. --set top_k=1 --set shared=w,w2. Repeatable."),
        click.option("--eval-every", default=1, show_default=True, type=click.IntRange(min=1),
                     help="Evaluate on the test split every N epochs (and after the last)."),
        click.option("--no-progress", is_flag=True, help="No progress bars (log lines only)."),
    ]
    for opt in reversed(opts):
        fn = opt(fn)
    return fn


def _run(task: str, size: str, init_from: str | None = None, mask_ratio: float | None = None, **kw) -> None:
    from .fit import RunConfig, fit

    data_tag = kw["data"].rstrip("/").split("/")[-1]
    out = kw.pop("out") or f"runs/{task}-{size}-{data_tag}"
    run = RunConfig(task=task, size=size, out=out, init_from=init_from, mask_ratio=mask_ratio,
                    compile=kw.pop("compile_"), progress=not kw.pop("no_progress"), **kw)
    metrics = fit(run, log=lambda m: click.echo(m, err=True))
    if not metrics:  # ranks other than 0 under torchrun report nothing
        return
    if metrics.get("test"):
        click.echo(f"final test top-1 {metrics['test']['acc']:.4f} -> {out}/checkpoint.pt")
    else:
        click.echo(f"final train loss {metrics['train']['loss']:.5f} -> {out}/checkpoint.pt")


@main.command()
@SIZE
@training_options
@user_errors
def train(size: str, **kw) -> None:
    """Supervised mLiT training with the paper's recipe (AdamW, warm-up + cosine, lr = 3e-4 * batch / 256).

    Runs on one device, or on many under `torchrun --nproc_per_node=N`. Writes checkpoint.pt after every
    epoch (atomically), metrics.jsonl, loss.png and experts.png to --out.
    """
    _run("train", size, **kw)


@main.command()
@SIZE
@click.option("--mask-ratio", default=None, type=click.FloatRange(0, 1, max_open=True),
              help="Fraction of patches hidden from the encoder [default: 0.75, the paper's].")
@training_options
@user_errors
def pretrain(size: str, mask_ratio: float | None, **kw) -> None:
    """mmLiT masked auto-encoder pre-training (labels unused). Loss curves are plotted log-log."""
    _run("pretrain", size, mask_ratio=mask_ratio, **kw)


@main.command()
@click.option("--from", "init_from", required=True, type=click.Path(dir_okay=False),
              help="The mmLiT pre-training checkpoint whose encoder is fine-tuned.")
@training_options
@user_errors
def finetune(init_from: str, **kw) -> None:
    """Fine-tune a classifier from an mmLiT encoder; the head is new, sized to the dataset."""
    _run("finetune", "pretrained", init_from=init_from, **kw)


@main.command("eval")
@click.option("--checkpoint", "ckpt_path", required=True, type=click.Path(dir_okay=False),
              help="A supervised or fine-tuned mLiT checkpoint.")
@click.option("--data", default=None, help="Dataset to evaluate on [default: the one it was trained on].")
@click.option("--data-root", default="data", show_default=True, type=click.Path(file_okay=False))
@click.option("--split", default="test", show_default=True, type=click.Choice(["train", "test"]))
@click.option("--batch-size", default=256, show_default=True, type=click.IntRange(min=1))
@click.option("--device", default="auto", show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@user_errors
def eval_(ckpt_path: str, data: str | None, data_root: str, split: str, batch_size: int, device: str,
          as_json: bool) -> None:
    """Top-1 accuracy, loss and per-layer expert utilisation of a checkpoint on a dataset split."""
    from .checkpoint import describe, load_checkpoint, model_from_checkpoint
    from .data import Loader, load_dataset
    from .fit import resolve_device
    from .train import ExpertCounter, evaluate

    ckpt = load_checkpoint(ckpt_path, kind="mlit")
    dev = resolve_device(device)
    ds = load_dataset(data or ckpt["data"]["name"].removeprefix("imagefolder:"), split, data_root)
    if len(ds.classes) != len(ckpt["data"]["classes"]):
        raise click.ClickException(f"{ds.name} has {len(ds.classes)} classes but the model was trained on "
                                   f"{len(ckpt['data']['classes'])}")
    model = model_from_checkpoint(ckpt).to(dev).eval()
    counter = ExpertCounter(model.cfg.experts_per_layer())
    metrics = evaluate(model, Loader(ds, batch_size, train=False, device=dev), counter=counter)
    result = {"checkpoint": ckpt_path, "model": describe(ckpt), "data": ds.name, "split": split,
              "images": metrics["images"], "top1": metrics["acc"], "loss": metrics["loss"],
              "experts": counter.fractions()}
    if as_json:
        click.echo(json.dumps(result, indent=2))
    else:
        click.echo(f"{result['model']}\n{ds.name} {split}: top-1 {result['top1']:.4f} on {result['images']} images, "
                   f"loss {result['loss']:.4f}")
        for i, row in enumerate(result["experts"]):
            click.echo(f"  layer {i}: expert shares " + " ".join(f"{v:.2f}" for v in row))


@main.command()
@click.option("--checkpoint", type=click.Path(dir_okay=False), default=None,
              help="A trained mLiT checkpoint. Without it the weights are random (latency work only).")
@click.option("--size", default=None, help="Model size when exporting random weights: s, xs or xxs.")
@click.option("--num-classes", default=10, show_default=True, type=click.IntRange(min=1),
              help="Head size for random weights.")
@click.option("--out", "out", default="model.onnx", show_default=True, type=click.Path(dir_okay=False),
              help="The fp32 ONNX; variants are written beside it as NAME.fp16.onnx and NAME.int8.onnx.")
@click.option("--opset", default=18, show_default=True, type=click.IntRange(18, 20))
@click.option("--batch", default=None, type=click.IntRange(min=1),
              help="Fix the batch size [default: dynamic batch].")
@click.option("--probe", is_flag=True, help="Also output each layer's top-k expert indices (routing checks).")
@click.option("--precision", "precisions", default="fp32", show_default=True,
              help="Comma-separated: fp32, fp16, int8.")
@click.option("--calib-data", default=None,
              help="Dataset for INT8 calibration [default: the checkpoint's, or mnist5k].")
@click.option("--calib-n", default=512, show_default=True, type=click.IntRange(min=1),
              help="Calibration images, stratified over the classes.")
@click.option("--data-root", default="data", show_default=True, type=click.Path(file_okay=False))
@user_errors
def export(checkpoint, size, num_classes, out, opset, batch, probe, precisions, calib_data, calib_n, data_root):
    """Export to ONNX through `to_deploy` (static-shape MoE), check it against PyTorch, make fp16/INT8 variants.

    Each .onnx gets a .onnx.json sidecar with its provenance.
    """
    from pathlib import Path

    from .calibrate import Recipe, calibrate_int8, calibration_set
    from .data import sample_images
    from .export import export_onnx, load_for_export, variant_parity
    from .precision import to_fp16

    wanted = [p.strip() for p in precisions.split(",") if p.strip()]
    bad = [p for p in wanted if p not in ("fp32", "fp16", "int8")]
    if bad or not wanted:
        raise click.ClickException(f"--precision {precisions!r}: choose from fp32, fp16, int8")
    if size is not None:
        _size(None, None, size)
        size = size.lower()
    model, info = load_for_export(checkpoint, size, num_classes)
    if info["random_weights"]:
        click.echo("warning: no --checkpoint, the weights are RANDOM: fine for latency, meaningless for accuracy",
                   err=True)
    out = Path(out)
    rec = export_onnx(model, out, info, opset=opset, batch=batch, probe=probe)
    click.echo(f"{out}: fp32, opset {opset}, batch {rec['batch']}, ONNX Runtime vs PyTorch max abs error "
               f"{rec['parity']['max_abs_err']:.2e}")
    stem = out.with_suffix("")
    variants = [p for p in ("fp16", "int8") if p in wanted]
    if not variants:
        return
    data = calib_data or info["preprocess"]["dataset"] or "mnist5k"
    calib = calibration_set(Recipe(data, "train", calib_n), data_root) if "int8" in variants else None
    held_out, _ = sample_images(data, "test", 1000, data_root)
    for precision in variants:
        path = Path(f"{stem}.{precision}.onnx")
        if precision == "fp16":
            to_fp16(out, path)
        else:
            calibrate_int8(out, path, calib)
        parity = variant_parity(path, model, held_out)
        what = ("LayerNorm, softmax, router, head in fp32" if precision == "fp16" else
                f"QDQ calibrated on {calib.manifest['images']} images of {calib.manifest['dataset']}, stratified")
        click.echo(f"{path}: {precision} ({what}); vs PyTorch on {parity['images']} held-out images: top-1 agreement "
                   f"{parity['top1_agreement']:.4f}, max abs error {parity['max_abs_err']:.2e}")


def _batch_triple(ctx: click.Context, param: click.Parameter, value: str | None):
    if value is None:
        return None
    try:
        lo, opt, hi = (int(v) for v in value.split(","))
    except ValueError:
        raise click.BadParameter(f"{value!r}: expected MIN,OPT,MAX, e.g. 1,8,64") from None
    if not 1 <= lo <= opt <= hi:
        raise click.BadParameter(f"{value!r}: need 1 <= MIN <= OPT <= MAX")
    return lo, opt, hi


@main.command()
@click.option("--size", default=None, help="Model size s, xs or xxs [default: the checkpoint's, else xxs].")
@click.option("--precision", default="fp16", show_default=True, type=click.Choice(["fp32", "fp16", "int8"]),
              help="Carried by the ONNX: fp16 casts (norms, softmax, router, head stay fp32) or INT8 Q/DQ.")
@click.option("--checkpoint", type=click.Path(dir_okay=False), default=None,
              help="Trained mLiT checkpoint. Without it (and without --onnx) the weights are random.")
@click.option("--onnx", "onnx_path", type=click.Path(dir_okay=False), default=None,
              help="Build from an exported ONNX (e.g. calibrated on the workstation, copied to the device).")
@click.option("--target", default="auto", show_default=True,
              type=click.Choice(["auto", "tensorrt", "tensorrt-rtx", "onnxruntime"]),
              help="auto: TensorRT where it imports, else the ONNX for ONNX Runtime.")
@click.option("--frontend", default="onnx", show_default=True, type=click.Choice(["onnx", "torch-tensorrt"]),
              help="torch-tensorrt compiles to_deploy(model) with torch-tensorrt (CUDA workstations, fp32/fp16).")
@click.option("--batch", default=None, type=click.IntRange(min=1),
              help="A static batch size (static shapes everywhere, CUDA-graph friendly).")
@click.option("--dynamic-batch", default=None, callback=_batch_triple,
              help="MIN,OPT,MAX of the engine's batch profile [default: 1,8,64].")
@click.option("--workspace", default=1.0, show_default=True, type=click.FloatRange(min=0.0625),
              help="Builder memory-pool limit in GiB.")
@click.option("--timing-cache", default=None, type=click.Path(dir_okay=False),
              help="TensorRT timing cache: read if it exists, written after the build.")
@click.option("--dla-core", default=None, type=click.IntRange(min=0),
              help="Run on this DLA core with GPU fallback (Jetson Orin/Xavier).")
@click.option("--calib-data", default=None,
              help="INT8 calibration: a dataset name, an ImageFolder path, or a recipe JSON "
                   "(calibration/*.json) [default: the checkpoint's dataset, else mnist5k].")
@click.option("--calib-n", default=512, show_default=True, type=click.IntRange(min=1),
              help="Calibration images, stratified over the classes.")
@click.option("--calib-seed", default=0, show_default=True, type=int)
@click.option("--calib-cache", default=None, type=click.Path(file_okay=False),
              help="Calibration cache folder [default: ~/.cache/mlit-edge/calibration].")
@click.option("--no-calib-cache", is_flag=True, help="Always recalibrate.")
@click.option("--min-expert-tokens", default=1000, show_default=True, type=click.IntRange(min=1),
              help="Warn when an expert gets fewer calibration tokens than this.")
@click.option("--out", default="artifacts", show_default=True, type=click.Path(file_okay=False),
              help="Output folder for the .onnx/.plan files and their .json sidecars.")
@click.option("--num-classes", default=10, show_default=True, type=click.IntRange(min=1),
              help="Head size for random weights.")
@click.option("--opset", default=18, show_default=True, type=click.IntRange(18, 20))
@click.option("--data-root", default="data", show_default=True, type=click.Path(file_okay=False))
@click.option("--no-eval", is_flag=True, help="Skip the held-out top-1 measurement.")
@click.option("--json", "as_json", is_flag=True, help="Print the artifact's sidecar as JSON at the end.")
@user_errors
def build(size, precision, checkpoint, onnx_path, target, frontend, batch, dynamic_batch, workspace, timing_cache,
          dla_core, calib_data, calib_n, calib_seed, calib_cache, no_calib_cache, min_expert_tokens, out, num_classes,
          opset, data_root, no_eval, as_json) -> None:
    """Build a deployable artifact: a TensorRT .plan, or the ONNX for ONNX Runtime where TensorRT is absent.

    \b
    Examples:
      mlit-edge build --size xxs --precision fp16                  # random weights, latency work
      mlit-edge build --checkpoint runs/x/checkpoint.pt --precision int8 --target tensorrt-rtx
      mlit-edge build --onnx mlit-xxs-int8.onnx --target tensorrt  # on the Jetson

    Every artifact gets a .json sidecar: versions, device, flags, hashes, preprocessing, classes.
    """
    from .build import BuildRequest, run_build
    from .calibrate import default_cache_dir

    if size is not None:
        size = _size(None, None, size)
    if batch is not None and dynamic_batch is not None:
        raise click.ClickException("give --batch or --dynamic-batch, not both")
    req = BuildRequest(precision=precision, size=size, checkpoint=checkpoint, onnx=onnx_path, target=target,
                       frontend=frontend, batch=batch, dynamic_batch=dynamic_batch or (1, 8, 64),
                       workspace_gib=workspace, timing_cache=timing_cache, dla_core=dla_core, calib_data=calib_data,
                       calib_n=calib_n, calib_seed=calib_seed,
                       calib_cache=None if no_calib_cache else (calib_cache or str(default_cache_dir())),
                       min_expert_tokens=min_expert_tokens, out=out, num_classes=num_classes, opset=opset,
                       data_root=data_root, evaluate=not no_eval)
    result = run_build(req, log=lambda line: click.echo(line, err=True))
    if as_json:
        click.echo(json.dumps({"artifact": str(result.artifact), "target": result.target, "record": result.record,
                               "coverage": result.coverage}, indent=2))
    else:
        click.echo(str(result.artifact))


def _int_list(ctx: click.Context, param: click.Parameter, value: str) -> tuple[int, ...]:
    try:
        out = tuple(int(v) for v in value.split(",") if v.strip())
    except ValueError:
        raise click.BadParameter(f"{value!r}: expected comma-separated integers, e.g. 1,8,64") from None
    if not out or min(out) < 1:
        raise click.BadParameter(f"{value!r}: batch sizes must be at least 1")
    return out


@main.command()
@click.argument("artifacts", nargs=-1, required=True, type=click.Path(dir_okay=False))
@click.option("--reference", default=None, type=click.Path(dir_okay=False),
              help="PyTorch checkpoint to compare against [default: a .pt among ARTIFACTS, else the sidecar's].")
@click.option("--data", default=None, help="Dataset name or ImageFolder path [default: the model's dataset].")
@click.option("--split", default="test", show_default=True)
@click.option("--limit", default=None, type=click.IntRange(min=1), help="Use only the first N images.")
@click.option("--data-root", default="data", show_default=True, type=click.Path(file_okay=False))
@click.option("--batch", "batches", default="1,8,64", show_default=True, callback=_int_list,
              help="Comma-separated batch sizes to time.")
@click.option("--warmup-ms", default=200.0, show_default=True, type=click.FloatRange(min=0))
@click.option("--warmup-iters", default=10, show_default=True, type=click.IntRange(min=0))
@click.option("--duration", default=2.0, show_default=True, type=click.FloatRange(min=0.01),
              help="Seconds of timed calls per artifact and batch.")
@click.option("--iterations", default=None, type=click.IntRange(min=1), help="Time exactly N calls instead.")
@click.option("--threads", default=None, type=click.IntRange(min=1), help="CPU threads (ONNX Runtime, torch).")
@click.option("--ort-providers", default="cpu", show_default=True,
              help="ONNX Runtime execution providers in order: cpu, cuda, tensorrt (where installed).")
@click.option("--cuda-graph", is_flag=True, help="TensorRT: replay each batch as a captured CUDA graph.")
@click.option("--ort-arena/--no-ort-arena", default=True, show_default=True,
              help="ONNX Runtime's CPU memory arena. It keeps what the largest batch needed; --no-ort-arena "
                   "returns memory after each call, for some latency on large batches.")
@click.option("--isolate/--in-process", default=True, show_default=True,
              help="Bench each artifact in its own fresh process, so its memory figures are its own; "
                   "--in-process is faster to start but lets later artifacts reuse memory freed by earlier ones.")
@click.option("--json", "json_path", default=None, type=click.Path(dir_okay=False),
              help="Write the full report (with per-call samples) here.")
@click.option("--plot", "plot_dir", default=None, type=click.Path(file_okay=False),
              help="Write latency.png and accuracy_latency.png here.")
@user_errors
def bench(artifacts, reference, data, split, limit, data_root, batches, warmup_ms, warmup_iters, duration,
          iterations, threads, ort_providers, cuda_graph, ort_arena, isolate, json_path, plot_dir) -> None:
    """Latency, memory, accuracy and fidelity of .plan/.onnx/.pt artifacts against the PyTorch reference.

    \b
    Example:
      mlit-edge bench artifacts/*.onnx runs/x/checkpoint.pt --batch 1,8
    """
    from pathlib import Path

    from .bench import ORT_PROVIDERS, BenchConfig, format_table, plot, run_bench
    from .sidecar import atomic_path

    names = [p.strip().lower() for p in ort_providers.split(",") if p.strip()]
    unknown = [p for p in names if p not in ORT_PROVIDERS]
    if unknown:
        raise click.ClickException(f"--ort-providers: unknown {unknown}; choose from {', '.join(ORT_PROVIDERS)}")
    if json_path and not Path(json_path).resolve().parent.is_dir():
        raise click.ClickException(f"--json {json_path}: folder {Path(json_path).parent} does not exist")
    cfg = BenchConfig(batches=batches, warmup_ms=warmup_ms, warmup_iters=warmup_iters,
                      duration_s=None if iterations else duration, iterations=iterations, threads=threads,
                      cuda_graph=cuda_graph, providers=[ORT_PROVIDERS[p] for p in names], data=data, split=split,
                      limit=limit, data_root=data_root, reference=reference, isolate=isolate, ort_arena=ort_arena)
    report = run_bench(list(artifacts), cfg, log=lambda line: click.echo(line, err=True))
    click.echo(format_table(report))
    if json_path:
        with atomic_path(json_path) as tmp:
            tmp.write_text(json.dumps(report, indent=1) + "\n")
        click.echo(f"report: {json_path}", err=True)
    if plot_dir:
        for p in plot(report, plot_dir):
            click.echo(f"plot: {p}", err=True)


@main.command()
@click.option("--out", default="quickstart", show_default=True, type=click.Path(file_okay=False),
              help="Folder for the run, the artifacts and bench.json.")
@SIZE
@click.option("--epochs", default=4, show_default=True, type=click.IntRange(min=1))
@click.option("--batch-size", default=16, show_default=True, type=click.IntRange(min=1))
@click.option("--lr", default=1e-3, show_default=True, type=click.FloatRange(min=0, min_open=True))
@click.option("--batch", "batches", default="1,8", show_default=True, callback=_int_list,
              help="Batch sizes to time.")
@click.option("--duration", default=1.0, show_default=True, type=click.FloatRange(min=0.01),
              help="Seconds of timed calls per artifact and batch.")
@click.option("--set", "overrides", multiple=True, callback=_parse_overrides, metavar="KEY=VALUE",
              help="Override a model config field, as for train (e.g. --set depth=4). Repeatable.")
@click.option("--no-progress", is_flag=True)
@user_errors
def quickstart(out, size, epochs, batch_size, lr, batches, duration, overrides, no_progress) -> None:
    """The whole chain in one command on the embedded digits: train briefly, build fp32/fp16/int8, bench
    them against the PyTorch checkpoint and print the comparison table."""
    from .calibrate import default_cache_dir
    from .quickstart import format_table, run_quickstart

    report = run_quickstart(out, size, epochs, batch_size, lr, batches, duration, progress=not no_progress,
                            calib_cache=str(default_cache_dir()), overrides=overrides,
                            log=lambda line: click.echo(line, err=True))
    click.echo(format_table(report))
    click.echo(f"report: {out}/bench.json", err=True)


@main.command()
@click.argument("images", nargs=-1, required=True, type=click.Path(dir_okay=False))
@click.option("--model", "model_path", required=True, type=click.Path(dir_okay=False),
              help="A .plan (TensorRT) or .onnx (ONNX Runtime) built by mlit-edge, with its .json sidecar.")
@click.option("--top-k", default=1, show_default=True, type=click.IntRange(min=1))
@click.option("--json", "as_json", is_flag=True, help="Print a JSON list, one object per image.")
@user_errors
def predict(images, model_path, top_k, as_json) -> None:
    """Classify image files with the embedded runtime (no torch). Unreadable files get an error entry
    and the rest are still classified; the exit code is 2 when any failed."""
    from .runtime import predict_files

    results = predict_files(model_path, images, top_k)
    if as_json:
        click.echo(json.dumps(results, indent=1))
    else:
        for r in results:
            if "error" in r:
                click.echo(f"{r['path']}: ERROR {r['error']}")
            else:
                top = ", ".join(f"{name} {p:.3f}" for _, name, p in r["top"])
                click.echo(f"{r['path']}: {top}")
    if any("error" in r for r in results):
        sys.exit(2)


@main.command()
@click.option("--model", "model_path", required=True, type=click.Path(dir_okay=False))
@click.option("--inbox", required=True, type=click.Path(file_okay=False), help="Folder to watch for images.")
@click.option("--results", required=True, type=click.Path(dir_okay=False), help="JSON-lines file to append to.")
@click.option("--interval", default=0.5, show_default=True, type=click.FloatRange(min=0.01),
              help="Seconds between polls of an empty inbox.")
@user_errors
def serve(model_path, inbox, results, interval) -> None:
    """Always-on loop for a device: classify each image dropped into --inbox, append a JSON line to
    --results, move the image to inbox/done or inbox/failed. Runs until stopped (systemd unit in deploy/)."""
    from pathlib import Path

    from .runtime import watch

    Path(inbox).mkdir(parents=True, exist_ok=True)
    click.echo(f"serving {model_path}: watching {inbox}, results -> {results}", err=True)
    watch(model_path, inbox, results, interval)


@main.command("check")
@click.argument("onnx_path", type=click.Path(dir_okay=False))
@click.option("--no-build", is_flag=True, help="Static checks only, even where TensorRT is installed.")
@click.option("--json", "as_json", is_flag=True)
@user_errors
def check_cmd(onnx_path: str, no_build: bool, as_json: bool) -> None:
    """TensorRT compatibility report: denied ops, static shapes, TopK limits, and a real TensorRT(-RTX)
    parse and strongly typed engine build where one is installed. Exits non-zero when not buildable."""
    from dataclasses import asdict

    from .graph_check import check, format_report

    rep = check(onnx_path, build=not no_build)
    click.echo(json.dumps({**asdict(rep), "ok": rep.ok}, indent=2) if as_json else format_report(rep))
    if not rep.ok:
        sys.exit(1)


if __name__ == "__main__":
    main()
