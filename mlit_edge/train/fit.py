"""A whole training run (supervised, MAE pre-training or fine-tuning), resumable after a kill.

Each epoch ends with a metrics line in `metrics.jsonl`, refreshed plots, and an atomic `checkpoint.pt`
that holds everything needed to continue bit for bit: model, optimizer, scaler, scheduler, epoch and
every rank's RNG state.
"""
from __future__ import annotations

import json
import logging
from dataclasses import asdict
from pathlib import Path

import torch
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

from . import checkpoint as ck
from ..base.messages import printable
from ..model.config import MAEConfig, MLiTConfig, get_config, size_label
from ..model.mlit import MLiT, count_parameters
from .data import ImageSet, Loader, label_subset, load_dataset
from .device import amp_dtype, resolve_device
from .distributed import Dist, barrier, gather_objects, init_distributed, shutdown
from .loop import (RoutingStats, evaluate, lr_at, make_optimizer, noise_scale_at, param_groups, scaled_lr,
                   train_one_epoch)
from .plots import plot_curves, plot_experts, plot_reconstruction
from ..artifacts.outputs import check_writable
from .run_folder import check_resume, clean_start, rewrite_log
from .run_config import RunConfig

logger = logging.getLogger(__name__)


def build_model(run: RunConfig, train_set: ImageSet) -> tuple[nn.Module, str, MLiTConfig | MAEConfig, str]:
    """The model for the task, with its checkpoint kind, config and size name. A run from a checkpoint (finetune
    --from, train --checkpoint) starts from its body, under a fresh head where the data's classes are another
    number (`rehead`); the head is named by the data's classes either way."""
    from ..model.mae import MMLiT
    from .rehead import classifier_from_checkpoint

    classes = len(train_set.classes)
    if run.num_classes is not None and run.num_classes != classes:  # before any model is built
        raise ValueError(f"--num-classes {run.num_classes}: {printable(train_set.name)} has {classes} classes, and "
                         f"the head learns the data's labels; give a dataset of {run.num_classes} classes (an "
                         "ImageFolder with one folder per class), or leave --num-classes out")
    if run.init_from:
        pre = ck.load_checkpoint(run.init_from, kind="mmlit" if run.task == "finetune" else None)
        model = classifier_from_checkpoint(pre, classes, run.init_from, **run.overrides)
        return model, "mlit", model.cfg, size_label(pre.get("size") or run.size, model.cfg)
    if run.task == "pretrain":
        cfg = run.mae_config()
        return MMLiT(cfg), "mmlit", cfg, size_label(run.size, cfg.encoder)
    cfg = get_config(run.size, num_classes=classes, **run.overrides)
    return MLiT(cfg), "mlit", cfg, size_label(run.size, cfg)


def fit(run: RunConfig) -> dict:
    """Run training as `run` says; returns the last epoch's metrics. Rank 0 writes all files."""
    device = resolve_device(run.device)
    d = init_distributed(device)
    if d.enabled and device.type == "cuda":
        device = torch.device("cuda", d.local_rank)
    try:
        return _fit(run, device, d)
    finally:
        shutdown(d)


def _fit(run: RunConfig, device: torch.device, d: Dist) -> dict:
    out = Path(run.out)
    ckpt_path, log_path = out / "checkpoint.pt", out / "metrics.jsonl"
    if run.batch_size % d.world:
        raise ValueError(f"--batch-size {run.batch_size} must be divisible by the {d.world} processes")
    if ckpt_path.exists() and not run.resume:
        raise FileExistsError(f"{ckpt_path} already exists; pass --resume to continue it, or choose another --out")
    if run.resume and not ckpt_path.exists():
        raise FileNotFoundError(f"nothing to resume: {ckpt_path} does not exist")
    if run.deterministic:
        torch.use_deterministic_algorithms(True)
        torch.backends.cudnn.benchmark = False
    dtype = amp_dtype(run.amp, device)
    torch.manual_seed(run.seed + d.rank)

    train_set, subset = load_dataset(run.data, "train", run.data_root, run.download and d.main), None
    if run.labels_per_class is not None:  # few-label training: a class-balanced subset, drawn by the seed
        train_set, subset = label_subset(train_set, run.labels_per_class, run.subset_seed)
    test_set = load_dataset(run.data, "test", run.data_root) if run.task != "pretrain" and d.main else None
    shown = _reconstruction_images(run) if run.task == "pretrain" and d.main else None
    model, kind, cfg, size = build_model(run, train_set)
    model.to(device)
    per_rank = run.batch_size // d.world
    loader = Loader(train_set, per_rank, train=True, device=device, seed=run.seed, rank=d.rank, world=d.world,
                    resident=run.resident)
    if len(loader) == 0:
        raise ValueError(f"--batch-size {run.batch_size} is larger than the {len(train_set)} training images")
    if d.main:  # after the data and the model are known to suit the run, so that a refused start leaves no folder
        check_writable(out, "the run folder")  # fails before the first step, not after the first epoch
        for line in clean_start(out, log_path, run.resume):
            logger.info(f"note: {line}")
    base_lr = run.lr if run.lr is not None else scaled_lr(run.batch_size)
    total = run.epochs * len(loader)
    warmup = int(run.warmup_frac * total)
    optimizer = make_optimizer(param_groups(model, run.weight_decay), base_lr, device)
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: lr_at(step, total, base_lr, warmup, run.min_lr) / base_lr)
    scaler = torch.amp.GradScaler("cuda") if dtype == torch.float16 else None

    start_epoch, rows = 0, []
    if run.resume:
        state = ck.load_checkpoint(ckpt_path, map_location=device)
        check_resume(state, kind, cfg, size, train_set, ckpt_path, subset, run.epochs)
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        scheduler.load_state_dict(state["scheduler"])
        if scaler is not None and state.get("scaler"):
            scaler.load_state_dict(state["scaler"])
        start_epoch = state["epoch"]
        rngs = state["rng"]
        if len(rngs) == d.world:
            ck.set_rng_state(rngs[d.rank])
        else:
            logger.info(f"note: checkpoint has RNG states for {len(rngs)} processes, this run has {d.world}; reseeding")
        if d.main:
            rows = rewrite_log(log_path, start_epoch)
            logger.info(f"resuming {ckpt_path} after epoch {start_epoch}")

    net: nn.Module = DDP(model) if d.enabled else model
    if run.compile:
        net = torch.compile(net)
    experts = cfg.encoder.experts_per_layer() + [cfg.dec_experts] * cfg.dec_depth if kind == "mmlit" \
        else cfg.experts_per_layer()
    schedule = (cfg.encoder if kind == "mmlit" else cfg).noise_schedule
    noise_scale = None if schedule == "constant" else (lambda step: noise_scale_at(step, total, schedule))
    eval_loader = Loader(test_set, 256, train=False, device=device) if test_set is not None else None
    if d.main:
        n_params = count_parameters(model)
        logger.info(f"{run.task}: {kind}-{size} ({n_params / 1e6:.3f}M params) on {train_set.name} "
                    f"({len(train_set)} images), {d.world} process(es) on {device}, global batch {run.batch_size}, "
                    f"lr {base_lr:.2e}, amp {dtype or 'off'}, {run.epochs} epochs -> {out}")

    metrics: dict = rows[-1] if rows else {}
    for epoch in range(start_epoch, run.epochs):
        loader.set_epoch(epoch)
        counter = RoutingStats(experts)
        train_m = train_one_epoch(net, loader, optimizer, scheduler, scaler, "pretrain" if kind == "mmlit" else
                                  "train", counter, dtype, run.clip_grad, run.progress and d.main,
                                  desc=f"epoch {epoch + 1}/{run.epochs}", noise_scale=noise_scale, gates_of=model)
        rngs = gather_objects(ck.rng_state(), d)
        if d.main:
            test_m, test_counter = None, RoutingStats(experts)
            evaluating = (epoch + 1) % run.eval_every == 0 or epoch + 1 == run.epochs
            if eval_loader is not None and evaluating:
                test_m = evaluate(model, eval_loader, dtype, test_counter)
            if shown is not None and evaluating:
                out.mkdir(parents=True, exist_ok=True)
                plot_reconstruction(model, shown, out / "reconstruction.png")
            routing = {"train": counter.summary(), "test": test_counter.summary() or None}
            metrics = {"epoch": epoch, "train": train_m, "test": test_m, "experts": counter.fractions(),
                       "routing": routing, **({"subset": subset} if subset else {})}
            rows.append(metrics)
            out.mkdir(parents=True, exist_ok=True)
            with open(log_path, "a") as f:
                f.write(json.dumps(metrics) + "\n")
            _report(epoch, run.epochs, train_m, test_m)
            if evaluating:  # with the test split's numbers, not every epoch: a tiny subset's epoch is a second
                _plots(rows, counter.fractions(), (routing["test"] or routing["train"])["clean"], out, kind,
                       "test split" if routing["test"] else "training batches")
            ck.save_atomic(ck.make_checkpoint(
                kind, model, cfg, size, train_set.meta(), optimizer=optimizer.state_dict(),
                scheduler=scheduler.state_dict(), scaler=scaler.state_dict() if scaler else None,
                epoch=epoch + 1, step=scheduler.last_epoch, rng=rngs, args=asdict(run), metrics=metrics,
                init_from=run.init_from, subset=subset), ckpt_path)
        barrier(d)
    return metrics


def _reconstruction_images(run: RunConfig) -> ImageSet:
    """The images of pretrain's reconstruction figure: held-out ones where the data has a test split."""
    try:
        return load_dataset(run.data, "test", run.data_root)
    except (OSError, ValueError, RuntimeError):  # e.g. a torchvision set whose test split was not downloaded
        return load_dataset(run.data, "train", run.data_root)


def _report(epoch: int, epochs: int, train_m: dict, test_m: dict | None) -> None:
    msg = f"epoch {epoch + 1}/{epochs}: train loss {train_m['loss']:.4f}"
    if "acc" in train_m:
        msg += f" acc {train_m['acc']:.4f}"
    if test_m:
        msg += f" | test loss {test_m['loss']:.4f} top-1 {test_m['acc']:.4f}"
    logger.info(msg + f" | {train_m['img_per_s']:.0f} img/s, lr {train_m['lr']:.2e}")


def _plots(rows: list[dict], used: list[list[float]], clean: list[list[float]], out: Path, kind: str,
           clean_on: str) -> None:
    plot_curves(rows, out / "loss.png", loglog=kind == "mmlit",
                title="mmLiT pre-training loss (log-log)" if kind == "mmlit" else "mLiT training")
    if used:
        plot_experts({"training routing (with the gate noise)": used,
                      f"clean routing, as deployed ({clean_on})": clean}, out / "experts.png")
