"""`mlit-edge eval`: a checkpoint's top-1, loss and per-layer expert shares on a dataset split."""
from __future__ import annotations

from .checkpoint import describe, load_checkpoint, model_from_checkpoint
from .data import Loader, load_dataset
from .fit import resolve_device
from .loop import ExpertCounter, evaluate


def evaluate_checkpoint(path: str, data: str | None = None, data_root: str = "data", split: str = "test",
                        batch_size: int = 256, device: str = "auto") -> dict:
    """Evaluate a supervised (or fine-tuned) mLiT checkpoint; `data` defaults to its own dataset."""
    ckpt = load_checkpoint(path, kind="mlit")
    dev = resolve_device(device)
    ds = load_dataset(data or ckpt["data"]["name"].removeprefix("imagefolder:"), split, data_root)
    if len(ds.classes) != len(ckpt["data"]["classes"]):
        raise ValueError(f"{ds.name} has {len(ds.classes)} classes but the model was trained on "
                         f"{len(ckpt['data']['classes'])}")
    model = model_from_checkpoint(ckpt).to(dev).eval()
    counter = ExpertCounter(model.cfg.experts_per_layer())
    metrics = evaluate(model, Loader(ds, batch_size, train=False, device=dev), counter=counter)
    return {"checkpoint": str(path), "model": describe(ckpt), "data": ds.name, "split": split,
            "images": metrics["images"], "top1": metrics["acc"], "loss": metrics["loss"],
            "experts": counter.fractions()}


def format_evaluation(result: dict) -> str:
    lines = [result["model"], f"{result['data']} {result['split']}: top-1 {result['top1']:.4f} on {result['images']} "
                              f"images, loss {result['loss']:.4f}"]
    lines += [f"  layer {i}: expert shares " + " ".join(f"{v:.2f}" for v in row)
              for i, row in enumerate(result["experts"])]
    return "\n".join(lines)
