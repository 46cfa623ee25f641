"""What an export starts from: a trained checkpoint (or random weights) and the record that every
artifact made from it carries: the model, its classes and preprocessing, and where it came from."""
from __future__ import annotations

from ..model.config import MLiTConfig, get_config
from ..model.mlit import MLiT, count_parameters
from ..train.checkpoint import model_from_checkpoint, read_checkpoint


def model_record(cfg: MLiTConfig, size: str | None, data: dict, checkpoint: str | None, sha256: str | None,
                 params: int) -> dict:
    """The provenance fields of a model: config, size, classes, preprocessing and its checkpoint."""
    return {"model": {"kind": "mlit", "size": size, "config": {k: getattr(cfg, k) for k in cfg.__dataclass_fields__},
                      "params": params},
            "classes": data["classes"],
            "preprocess": {"size": data.get("img_size", cfg.img_size), "mean": data["mean"], "std": data["std"],
                           "resize": "antialiased bilinear, then uint8 rounding (mlit_edge.runtime.preprocess)",
                           "layout": "NCHW float32", "dataset": data.get("name")},
            "checkpoint": checkpoint, "checkpoint_sha256": sha256, "random_weights": checkpoint is None}


def load_for_export(checkpoint: str | None, size: str | None, num_classes: int = 10,
                    random_weights: bool = False) -> tuple[MLiT, dict]:
    """The classifier to export and what its artifacts record about it.

    Without a checkpoint a size builds from its shipped pretrained model (`pretrained:NAME`) where one
    exists for that size and class count; otherwise, or with `random_weights`, the weights are random
    (fine for latency work, meaningless for accuracy).
    """
    from ..train.pretrained import default_for

    if not checkpoint and not random_weights and size:
        checkpoint = default_for(size, num_classes)
    if checkpoint:
        ckpt, sha = read_checkpoint(checkpoint, kind="mlit")
        model = model_from_checkpoint(ckpt)
        if size and ckpt.get("size") not in (None, size):
            raise ValueError(f"{checkpoint} holds an mLiT-{str(ckpt.get('size')).upper()}, not {size.upper()}; "
                             "drop --size or pass the matching checkpoint")
        info = model_record(model.cfg, ckpt.get("size"), ckpt["data"], str(checkpoint), sha, count_parameters(model))
        return model.eval(), info
    if not size:
        raise ValueError("give --checkpoint or --size")
    import torch

    torch.manual_seed(0)
    model = MLiT(get_config(size, num_classes=num_classes))
    data = {"name": None, "classes": [str(i) for i in range(num_classes)], "mean": [0.5] * 3, "std": [0.5] * 3}
    return model.eval(), model_record(model.cfg, size, data, None, None, count_parameters(model))
