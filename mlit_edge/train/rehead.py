"""A pretrained body under a fresh head, as timm's `create_model(name, pretrained=True, num_classes=N)` gives one:
the few-label fine-tuning start that mmLiT is for. `mlit_edge.create_model` (train.hub), `mlit-edge train
--checkpoint CKPT` and `mlit-edge finetune --from CKPT` (train.fit) all start here.

A classifier keeps every tensor but its head's, and keeps the head too where it already has N outputs; an mmLiT
gives its encoder (`model.mae.classifier_from_mae`), its decoder and mask token dropped. A fresh head is
nn.Linear's own initialisation, random until trained, and says so in one logged line. It has no class names
from the pretrained model: whoever trains it names them (the dataset's, in a training run).
"""
from __future__ import annotations

import logging

from ..base.messages import printable
from ..model.mae import classifier_from_mae
from ..model.mlit import MLiT
from .checkpoint import CheckpointError, config_from_dict, fit_problem

logger = logging.getLogger(__name__)


def classifier_from_checkpoint(ckpt: dict, num_classes: int, source: str, **overrides) -> MLiT:
    """An mLiT classifier of `num_classes` outputs (0: the body alone, no head) with the body of checkpoint
    `ckpt` (as `load_checkpoint` returns it; `source` names it in messages), and `overrides` of its config (the
    fields training alone uses, such as drop_path). One line is logged where the head is fresh."""
    if isinstance(num_classes, bool) or not isinstance(num_classes, int) or num_classes < 0:
        raise ValueError(f"num_classes={num_classes!r}: give the number of classes of the new head (0 for none)")
    name = printable(source)
    if ckpt["kind"] == "mmlit":
        encoder = config_from_dict("mmlit", ckpt["config"]).encoder
        model = classifier_from_mae(ckpt["model"], encoder, num_classes, **overrides)
        logger.warning(f"{name}: its pretrained mmLiT encoder under a fresh head of {num_classes} outputs (random "
                       "until trained); the decoder is dropped")
        return model
    cfg = config_from_dict("mlit", ckpt["config"])
    model = MLiT(cfg.replace(num_classes=num_classes, **overrides))
    fresh = cfg.num_classes != num_classes
    if fresh:  # the new head's own tensors, the body's from the checkpoint
        body = {k: v for k, v in ckpt["model"].items() if not k.startswith("head.")}
        state = {**body, **{k: v for k, v in model.state_dict().items() if k.startswith("head.")}}
    else:
        state = ckpt["model"]
    problem = fit_problem({"model": state}, model)
    if problem:
        raise CheckpointError(f"refused {name}: {problem}")
    model.load_state_dict(state)
    if fresh:
        logger.warning(f"{name}: its pretrained body under a fresh head of {num_classes} outputs (random until "
                       f"trained) in place of its {cfg.num_classes}-class head, whose class names go with it")
    return model
