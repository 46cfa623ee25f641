"""Commands of the model and training stages: info, train, pretrain, finetune, eval, export-weights, quickstart."""
from __future__ import annotations

import json
from typing import Callable

import click

from ..base.messages import printable
from ..export.calibration import default_cache_dir
from ..model.config import GATINGS
from ..train.run_config import AMPS, RunConfig
from .common import SEED, FiniteFloat, SIZE, default, int_list, parse_set, user_errors


@click.command()
@SIZE
@click.option("--num-classes", default=100, show_default=True, type=click.IntRange(min=1),
              help="Classes of the head (the paper's counts use 100).")
@click.option("--json", "as_json", is_flag=True, help="Print the table as JSON instead of text.")
def info(size: str, num_classes: int, as_json: bool) -> None:
    """Per-layer table of a model size: hidden size, experts, parameters and MACs, with totals.

    Also shows how the reconstructed size compares with the paper's parameter count.
    """
    from ..model.info import size_report

    text, data = size_report(size, num_classes)
    click.echo(json.dumps(data, indent=2) if as_json else text)


def _stacked(opts: list) -> Callable:
    """One decorator that applies `opts` in order, as if each were written above the command."""
    def apply(fn):
        for opt in reversed(opts):
            fn = opt(fn)
        return fn
    return apply


# shared by train, pretrain and finetune: each option defaults to its `RunConfig` field
training_options = _stacked([
        click.option("--data", default=default(RunConfig, "data"), show_default=True,
                     help="mnist5k (embedded, no network), cifar10, cifar100, svhn, flowers102, or an "
                          "ImageFolder directory."),
        click.option("--data-root", default=default(RunConfig, "data_root"), show_default=True,
                     type=click.Path(file_okay=False), help="Where torchvision datasets live (or are downloaded to)."),
        click.option("--download", is_flag=True, help="Download a torchvision dataset if it is missing."),
        click.option("--epochs", default=default(RunConfig, "epochs"), show_default=True, type=click.IntRange(min=1)),
        click.option("--batch-size", default=default(RunConfig, "batch_size"), show_default=True,
                     type=click.IntRange(min=1),
                     help="Global batch size, split across torchrun processes."),
        click.option("--lr", type=FiniteFloat(min=0, min_open=True), default=default(RunConfig, "lr"),
                     help="Peak learning rate [default: 3e-4 * batch / 256, the paper's rule]."),
        click.option("--min-lr", default=default(RunConfig, "min_lr"), show_default=True, type=FiniteFloat(min=0)),
        click.option("--warmup-frac", default=default(RunConfig, "warmup_frac"), show_default=True,
                     type=FiniteFloat(0, 1),
                     help="Fraction of training spent in linear warm-up."),
        click.option("--weight-decay", default=default(RunConfig, "weight_decay"), show_default=True,
                     type=FiniteFloat(min=0)),
        click.option("--clip-grad", default=default(RunConfig, "clip_grad"), type=FiniteFloat(min=0, min_open=True),
                     help="Clip the gradient norm to this value."),
        click.option("--amp", default=default(RunConfig, "amp"), show_default=True, type=click.Choice(AMPS),
                     help="Mixed precision: auto is fp16 with a GradScaler on CUDA, bf16 on a CPU with AMX "
                          "(faster there) and fp32 on other CPUs; off is fp32 everywhere."),
        click.option("--device", default=default(RunConfig, "device"), show_default=True,
                     help="auto, cpu, cuda or cuda:N."),
        click.option("--seed", default=default(RunConfig, "seed"), show_default=True, type=SEED),
        click.option("--deterministic", is_flag=True, help="Use deterministic kernels (bitwise repeatable on CPU)."),
        click.option("--resident", is_flag=True,
                     help="Keep the whole dataset on the device and augment it there (fast GPU path)."),
        click.option("--compile", "compile", is_flag=True, help="torch.compile the model (slow start, faster steps)."),
        click.option("--out", default=None, type=click.Path(file_okay=False),
                     help="Run folder for checkpoint.pt, metrics.jsonl and the PNGs [default: runs/TASK-SIZE-DATA]."),
        click.option("--resume", is_flag=True, help="Continue the run in --out from its checkpoint."),
        click.option("--set", "overrides", multiple=True, callback=parse_set, metavar="KEY=VALUE",
                     help="Override a model config field, e.g. --set top_k=1 --set shared=w,w2; for pretrain also "
                          "the decoder's (dec_dim, dec_depth, dec_heads, dec_groups, dec_hidden, dec_experts, alpha, "
                          "beta, norm_pix_loss). Repeatable."),
        click.option("--gating", default=None, type=click.Choice(sorted(GATINGS)),
                     help="A named gating of the routing ablation (docs/training.md, 'Routing health') [default: the "
                          "config's]; --set fields win over it."),
        click.option("--eval-every", default=default(RunConfig, "eval_every"), show_default=True,
                     type=click.IntRange(min=1),
                     help="Evaluate on the test split and redraw the run's PNGs (pretrain: the reconstruction "
                          "figure) every N epochs, and after the last."),
        click.option("--progress/--no-progress", default=default(RunConfig, "progress"),
                     help="Progress bars (--no-progress: log lines only)."),
])


few_labels = _stacked([  # train and finetune
    click.option("--labels-per-class", default=default(RunConfig, "labels_per_class"), type=int, metavar="N",
                 help="Train on N labelled images of each class only: a class-balanced subset of the training "
                      "split, drawn by --subset-seed and recorded (indices' sha256) in the checkpoint and "
                      "metrics.jsonl [default: every image]."),
    click.option("--subset-seed", default=default(RunConfig, "subset_seed"), show_default=True, type=SEED,
                 help="The draw of --labels-per-class's subset: the same seed gives the same images."),
])


def _train_command(task: str, size: str | None, **kw) -> None:
    from ..train.fit import fit  # torch

    run = RunConfig.for_task(task, size, **kw)
    metrics = fit(run)
    if not metrics:  # ranks other than 0 under torchrun report nothing
        return
    if metrics.get("test"):
        click.echo(f"final test top-1 {metrics['test']['acc']:.4f} -> {run.out}/checkpoint.pt")
    else:
        click.echo(f"final train loss {metrics['train']['loss']:.5f} -> {run.out}/checkpoint.pt")


@click.command()
@SIZE
@click.option("--checkpoint", "init_from", default=None, type=click.Path(dir_okay=False),
              help="Start from this model's weights instead of random ones: a checkpoint, a model.safetensors, or "
                   "pretrained:NAME (mlit-edge pretrained). A classifier keeps its head where the data has as many "
                   "classes, and gets a fresh one otherwise; an mmLiT gives its encoder. The size is its own.")
@click.option("--num-classes", default=default(RunConfig, "num_classes"), type=click.IntRange(min=1),
              help="Outputs of the head, as timm's --num-classes; the data's classes name them, so it must be their "
                   "count [default: the data's].")
@training_options
@few_labels
@user_errors
def train(size: str, **kw) -> None:
    """Supervised mLiT training with the paper's recipe (AdamW, warm-up + cosine, lr = 3e-4 * batch / 256).

    Runs on one device, or on many under `torchrun --nproc_per_node=N`. Writes checkpoint.pt after every
    epoch (atomically), metrics.jsonl, loss.png and experts.png to --out. With --checkpoint it fine-tunes
    that model (`mlit-edge train --checkpoint pretrained:xxs-mnist5k --data FOLDER --num-classes 5`).
    """
    if kw["init_from"] and click.get_current_context().get_parameter_source("size").name == "DEFAULT":
        size = None  # the checkpoint's own size, not --size's default
    _train_command("train", size, **kw)


@click.command()
@SIZE
@click.option("--mask-ratio", default=default(RunConfig, "mask_ratio"), type=FiniteFloat(0, 1, max_open=True),
              help="Fraction of patches hidden from the encoder [default: 0.75, the paper's].")
@training_options
@user_errors
def pretrain(size: str, **kw) -> None:
    """mmLiT masked auto-encoder pre-training (labels unused). Loss curves are plotted log-log."""
    _train_command("pretrain", size, **kw)


@click.command()
@click.option("--from", "init_from", required=True, type=click.Path(dir_okay=False),
              help="The mmLiT pre-training checkpoint whose encoder is fine-tuned: a pretrain run's "
                   "checkpoint.pt, or pretrained:xxs-mnist5k-mae, the one that ships (mlit-edge pretrained).")
@training_options
@few_labels
@user_errors
def finetune(**kw) -> None:
    """Fine-tune a classifier from an mmLiT encoder; the head is new, sized to the dataset."""
    _train_command("finetune", None, **kw)  # the size is the encoder's (train.run_config.encoder_size)


@click.command("eval")
@click.option("--checkpoint", "path", required=True, type=click.Path(dir_okay=False),
              help="A supervised or fine-tuned mLiT checkpoint.")
@click.option("--data", default=None, help="Dataset to evaluate on [default: the one it was trained on].")
@click.option("--data-root", default="data", show_default=True, type=click.Path(file_okay=False))
@click.option("--split", default="test", show_default=True, type=click.Choice(["train", "test"]))
@click.option("--batch-size", default=256, show_default=True, type=click.IntRange(min=1))
@click.option("--device", default="auto", show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@user_errors
def eval_(as_json: bool, **kw) -> None:
    """Top-1 accuracy, loss and per-layer expert utilisation of a checkpoint on a dataset split."""
    from ..train.eval_checkpoint import evaluate_checkpoint, format_evaluation

    result = evaluate_checkpoint(**kw)
    click.echo(json.dumps(result, indent=2) if as_json else format_evaluation(result))


@click.command("export-weights")
@click.argument("checkpoint")
@click.option("--out", required=True, type=click.Path(file_okay=False),
              help="The folder for model.safetensors, config.json and README.md (created if missing).")
@click.option("--force", is_flag=True, help="Replace a model.safetensors, config.json or README.md already in --out.")
@user_errors
def export_weights(checkpoint: str, out: str, force: bool) -> None:
    """A checkpoint (or pretrained:NAME) as model.safetensors + config.json, for sharing: the weights with no
    pickle, and the config, classes, preprocessing and provenance (the checkpoint's sha256), with the keys timm
    reads (architecture, num_classes, label_names, pretrained_cfg); and a model card, README.md, with the metrics
    the checkpoint records. Training state (optimizer, epoch counters for --resume) stays in the .pt."""
    from ..train.export_weights import export_weights as write

    config = write(checkpoint, out, force)
    click.echo(f"{printable(out)}: model.safetensors ({config['weights']['bytes']} bytes, sha256 "
               f"{config['weights']['sha256'][:12]}), config.json and README.md, from {printable(checkpoint)}")


@click.command()
@click.option("--out", default="quickstart", show_default=True, type=click.Path(file_okay=False),
              help="Folder for the run, the artifacts and bench.json.")
@SIZE
@click.option("--train", is_flag=True, help="Train a model from scratch first instead of starting from the "
                                            "shipped pretrained one (the recipe of docs/training.md: positions "
                                            "from the sin-cos table, --set pos_init=normal for timm's init).")
@click.option("--epochs", default=10, show_default=True, type=click.IntRange(min=1),
              help="With --train (10 with the defaults: about 96% top-1, docs/training.md).")
@click.option("--batch-size", default=32, show_default=True, type=click.IntRange(min=1), help="With --train.")
@click.option("--lr", default=1e-3, show_default=True, type=FiniteFloat(min=0, min_open=True),
              help="With --train.")
@click.option("--batch", "batches", default="1,8", show_default=True, callback=int_list,
              help="Batch sizes to time.")
@click.option("--duration", "duration_s", default=0.5, show_default=True, type=FiniteFloat(min=0.01),
              help="Seconds of timed calls per artifact and batch.")
@click.option("--set", "overrides", multiple=True, callback=parse_set, metavar="KEY=VALUE",
              help="With --train: override a model config field, as for train (e.g. --set depth=4). Repeatable.")
@click.option("--progress/--no-progress", default=True)
@user_errors
def quickstart(**kw) -> None:
    """The whole chain in one command on the embedded digits: from the shipped pretrained mLiT (or, with
    --train, one trained here), build fp32/fp16/int8, bench them against the PyTorch checkpoint and print
    the comparison table."""
    from ..bench.report import format_bench
    from ..quickstart import run_quickstart

    report = run_quickstart(calib_cache=str(default_cache_dir()), **kw)
    click.echo(format_bench(report))


@click.command("pretrained")
@click.option("--json", "as_json", is_flag=True, help="Print the index as JSON.")
def pretrained(as_json: bool) -> None:
    """The pretrained models that ship inside mlit-edge: mLiT classifiers, usable as --checkpoint
    pretrained:NAME (build without --checkpoint uses its size's one by default), and mmLiT masked
    auto-encoders, to fine-tune with finetune --from pretrained:NAME."""
    from ..train.pretrained import PREFIX, index, kind_of

    models = index()
    if as_json:
        click.echo(json.dumps(models, indent=2))
        return
    if not models:
        click.echo("no pretrained model ships with this install")
    for name, e in models.items():
        if kind_of(e) == "mmlit":
            what = (f"mmLiT-{e['size'].upper()} masked auto-encoder on {e['dataset']} ({e['train_images']} images, "
                    f"labels unused), {e['params']:,} params, final loss {e['final_loss']:.4f}; use it with "
                    f"finetune --from {PREFIX}{name}")
        else:
            what = (f"mLiT-{e['size'].upper()} on {e['dataset']}, {e['params']:,} params, top-1 {e['top1']:.4f} on "
                    f"{e['test_images']} held-out images")
        click.echo(f"{PREFIX}{name}: {what}, {e['bytes'] / 1e6:.1f} MB, sha256 {e['sha256'][:16]}..."
                   f"{' (the default for its size)' if e.get('default') else ''}\n  made by: {e['command']}")
