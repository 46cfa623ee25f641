"""mmLiT against mLiT by label budget: fine-tuning the shipped masked auto-encoder against training from
scratch, on L labelled digits per class, side by side in one run.

Both arms run `mlit-edge finetune` / `mlit-edge train` (the library's own `fit`) on the same class-balanced
subsets (`--labels-per-class L --subset-seed S`), with the same optimizer steps, schedule, batch, lr and
augmentation; from scratch uses the project's best recipe (`pos_init=sincos`, which the shipped mmLiT's
encoder has too). Each run is scored once, on the 1000 held-out test images. It also times pre-training
steps against supervised ones, side by side.

    python benchmarks/few_labels.py --json few_labels.json --plot docs/few-labels.png

Every run gets the same number of optimizer steps (`--steps`), so a budget is `ceil(steps / batches per
epoch)` epochs: 10 labels a class (100 images, 3 batches of 32) is 100 epochs for 300 steps, 400 is 3.
"""
from __future__ import annotations

import argparse
import json
import math
import statistics
import tempfile
import time
from pathlib import Path

import torch

from mlit_edge.model.config import get_config
from mlit_edge.model.mae import MMLiT
from mlit_edge.model.mlit import MLiT
from mlit_edge.train.checkpoint import load_checkpoint, model_from_checkpoint
from mlit_edge.train.data import Loader, label_subset, load_dataset
from mlit_edge.train.device import amp_dtype
from mlit_edge.train.fit import RunConfig, fit
from mlit_edge.train.loop import RoutingStats, make_optimizer, param_groups, train_one_epoch

ARMS = {"mmLiT (fine-tuned)": "finetune", "mLiT (from scratch)": "train"}


def epochs_for(labels: int, classes: int, batch: int, steps: int) -> int:
    """The epochs that give `steps` optimizer steps on `labels` images of each class (whole batches only)."""
    return math.ceil(steps / ((labels * classes) // batch))


def one_run(task: str, labels: int, seed: int, epochs: int, args, folder: Path) -> dict:
    """Train or fine-tune on one subset; the test top-1 and the wall time."""
    run = RunConfig.for_task(
        task, args.size, data="mnist5k", epochs=epochs, batch_size=args.batch_size, lr=args.lr, seed=seed,
        labels_per_class=labels, subset_seed=seed, eval_every=epochs, progress=False,
        init_from=args.pretrained if task == "finetune" else None,
        overrides={} if task == "finetune" else {"pos_init": "sincos"}, out=str(folder / f"{task}-L{labels}-s{seed}"))
    start = time.perf_counter()
    metrics = fit(run)
    return {"top1": metrics["test"]["acc"], "seconds": time.perf_counter() - start}


def step_throughput(args, dtype, rounds: int = 3) -> dict[str, float]:
    """img/s of pre-training steps (the encoder sees 25% of the patches, then the decoder all) and of
    supervised steps, alternated so both see the same machine; the median of `rounds` each."""
    data, _ = label_subset(load_dataset("mnist5k", "train"), 64)  # 640 images: 20 steps of 32
    mae = model_from_checkpoint(load_checkpoint(args.pretrained, kind="mmlit"))
    models = {"pretrain": mae, "train": MLiT(get_config(args.size, num_classes=10, pos_init="sincos"))}
    rates: dict[str, list[float]] = {k: [] for k in models}
    for _ in range(rounds + 1):  # the first round warms up
        for task, model in models.items():
            loader = Loader(data, args.batch_size, train=True, seed=0)
            opt = make_optimizer(param_groups(model, 0.05), 1e-4, torch.device("cpu"))
            sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0)
            layers = (mae.cfg.encoder.experts_per_layer() + [mae.cfg.dec_experts] * mae.cfg.dec_depth
                      if isinstance(model, MMLiT) else model.cfg.experts_per_layer())
            m = train_one_epoch(model, loader, opt, sched, None, task, RoutingStats(layers), dtype, progress=False)
            rates[task].append(m["img_per_s"])
    return {k: statistics.median(v[1:]) for k, v in rates.items()}


def summarise(runs: list[dict]) -> dict:
    tops = [r["top1"] for r in runs]
    return {"mean": statistics.mean(tops), "std": statistics.stdev(tops) if len(tops) > 1 else 0.0,
            "runs": runs, "seconds": sum(r["seconds"] for r in runs)}


def table(results: dict, budgets: dict[int, int]) -> str:
    lines = [f"{'labels/class':>12} {'epochs':>6}  " + "  ".join(f"{a:>22}" for a in ARMS) + "    gain (points)"]
    for labels, epochs in budgets.items():
        cells = [results[a][str(labels)] for a in ARMS]
        gain = 100 * (cells[0]["mean"] - cells[1]["mean"])
        lines.append(f"{labels:>12} {epochs:>6}  " + "  ".join(
            f"{100 * c['mean']:>13.1f} ± {100 * c['std']:>4.1f} %" for c in cells) + f"    {gain:+.1f}")
    return "\n".join(lines)


def plot(results: dict, budgets: dict[int, int], path: Path, title: str) -> None:
    from mlit_edge.train.plots import pyplot, save_figure

    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6, 4))
    xs = list(budgets)
    for arm in ARMS:
        cells = [results[arm][str(x)] for x in xs]
        ax.errorbar(xs, [100 * c["mean"] for c in cells], yerr=[100 * c["std"] for c in cells], marker="o",
                    capsize=4, label=arm)
    ax.set_xscale("log")
    ax.set_xticks(xs)
    ax.set_xticklabels([str(x) for x in xs])
    ax.set_xlabel("labelled training images per class")
    ax.set_ylabel("test top-1 (%), mean ± std over subsets")
    ax.set_title(title, fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend()
    save_figure(fig, path)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pretrained", default="pretrained:xxs-mnist5k-mae", help="the mmLiT to fine-tune")
    ap.add_argument("--size", default="xxs", help="the from-scratch mLiT's size (the mmLiT's encoder's)")
    ap.add_argument("--labels", default="10,30,100,400", help="labels per class, comma-separated")
    ap.add_argument("--seeds", default="0,1,2", help="subset (and training) seeds, comma-separated")
    ap.add_argument("--steps", type=int, default=300, help="optimizer steps of every run")
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--lr", type=float, default=1e-3, help="peak lr of both arms (warm-up + cosine)")
    ap.add_argument("--json", default=None, help="write every run's result here")
    ap.add_argument("--plot", default=None, help="write accuracy against labels per class here (PNG)")
    args = ap.parse_args()
    labels = [int(x) for x in args.labels.split(",")]
    seeds = [int(x) for x in args.seeds.split(",")]
    if min(labels) * 10 < args.batch_size or min(labels) < 1:
        raise SystemExit(f"--labels {args.labels}: every budget needs at least one whole batch of "
                         f"{args.batch_size} (10 classes)")
    budgets = {L: epochs_for(L, 10, args.batch_size, args.steps) for L in labels}
    dtype = amp_dtype("auto", torch.device("cpu"))
    start = time.perf_counter()
    print(f"{args.pretrained} fine-tuned against mLiT-{args.size.upper()} from scratch on mnist5k: labels per class "
          f"{labels}, seeds {seeds}, {args.steps} steps of {args.batch_size} each, lr {args.lr:g}, amp "
          f"{dtype or 'off'}, {torch.get_num_threads()} threads", flush=True)
    results: dict = {arm: {} for arm in ARMS}
    with tempfile.TemporaryDirectory(prefix="few-labels-") as tmp:
        for L, epochs in budgets.items():
            runs: dict[str, list[dict]] = {arm: [] for arm in ARMS}
            for seed in seeds:
                for arm, task in ARMS.items():  # alternated, so both arms share the machine's moods
                    runs[arm].append({"seed": seed, **one_run(task, L, seed, epochs, args, Path(tmp))})
                    print(f"  L={L:<4} seed {seed}  {arm:<20} top-1 {runs[arm][-1]['top1']:.4f}  "
                          f"({runs[arm][-1]['seconds']:.0f} s)", flush=True)
            for arm in ARMS:
                results[arm][str(L)] = summarise(runs[arm])
    speed = step_throughput(args, dtype)
    wall = time.perf_counter() - start
    print("\ntest top-1 on the 1000 held-out digits, mean ± std over subsets "
          f"(seeds {', '.join(map(str, seeds))}), {args.steps} steps each\n" + table(results, budgets))
    print(f"\ntraining throughput, side by side (batch {args.batch_size}): pre-training {speed['pretrain']:.0f} img/s, "
          f"supervised {speed['train']:.0f} img/s ({speed['pretrain'] / speed['train']:.2f}x)")
    print(f"wall time {wall / 60:.1f} min")
    if args.json:
        Path(args.json).write_text(json.dumps({"args": vars(args), "epochs": budgets, "results": results,
                                               "throughput_img_per_s": speed, "wall_s": wall}, indent=1) + "\n")
    if args.plot:
        plot(results, budgets, Path(args.plot), f"{args.pretrained} vs mLiT-{args.size.upper()} from scratch, "
                                                 f"{args.steps} steps each")


if __name__ == "__main__":
    main()
