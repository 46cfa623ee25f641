"""`mlit-edge eval`: a checkpoint's top-1, loss and per-layer expert shares on a dataset split."""
from __future__ import annotations

from ..base.messages import printable
from .checkpoint import checked_model, describe_checkpoint, load_checkpoint
from .data import Loader, load_dataset
from .device import resolve_device
from .loop import RoutingStats, evaluate, noise_scale_at, set_noise_scale


def evaluate_checkpoint(path: str, data: str | None = None, data_root: str = "data", split: str = "test",
                        batch_size: int = 256, device: str = "auto") -> dict:
    """Evaluate a supervised (or fine-tuned) mLiT checkpoint; `data` defaults to its own dataset."""
    ckpt = load_checkpoint(path, kind="mlit")
    model = checked_model(ckpt, path)  # before the data: export-weights refuses a pair in these words
    dev = resolve_device(device)
    ds = load_dataset(data or ckpt["data"]["name"].removeprefix("imagefolder:"), split, data_root)
    if len(ds.classes) != len(ckpt["data"]["classes"]):
        raise ValueError(f"{ds.name} has {len(ds.classes)} classes but the model was trained on "
                         f"{len(ckpt['data']['classes'])}")
    model = model.to(dev).eval()
    set_noise_scale(model, noise_scale_at(1, 1, model.cfg.noise_schedule))  # the noise training ended with
    counter = RoutingStats(model.cfg.experts_per_layer())
    metrics = evaluate(model, Loader(ds, batch_size, train=False, device=dev), counter=counter)
    return {"checkpoint": str(path), "model": describe_checkpoint(ckpt), "data": ds.name, "split": split,
            "images": metrics["images"], "top1": metrics["acc"], "loss": metrics["loss"],
            "experts": counter.fractions(), "routing": counter.summary()}


def format_evaluation(result: dict) -> str:
    """The top-1, then per layer the clean routing's shares and health (docs/training.md, "Routing health")."""
    lines = [result["model"], f"{result['data']} {result['split']}: top-1 {result['top1']:.4f} on {result['images']} "
                              f"images, loss {result['loss']:.4f}",
             "routing per layer: clean expert shares (what the deployed graph does) | entropy / log E | agreement "
             "of one noisy draw with the clean top-k | median gap/noise"]
    r = result["routing"]
    for i, shares in enumerate(r["clean"]):
        ratio = "-" if r["gap_noise"][i] is None else f"{r['gap_noise'][i]:.2f}"
        lines.append(f"  layer {i}: " + " ".join(f"{v:.2f}" for v in shares).ljust(30)
                     + f" | {r['entropy'][i]:.3f} | {r['agreement'][i]:.3f} | {ratio}")
    return "\n".join(map(printable, lines))  # the model and dataset names are the checkpoint's own words
