"""Models by name, as timm's `create_model`: a new mLiT of a size, or a shipped pretrained model loaded and
checked (`mlit_edge.create_model("xxs", pretrained=True)`), re-headed for another number of classes
(`num_classes=5`: the pretrained body under a fresh head, `rehead`)."""
from __future__ import annotations

from pathlib import Path

from torch import nn

from ..model.mlit import new_model
from .checkpoint import load_checkpoint, model_from_checkpoint
from .rehead import classifier_from_checkpoint
from .pretrained import PREFIX, PretrainedError, default_for, entry_of, spec_name
from ..model.config import SIZES


def load_pretrained(spec: str | Path) -> nn.Module:
    """The model of a shipped `pretrained:NAME` (or NAME): an MLiT classifier, or an MMLiT auto-encoder,
    in eval mode, once its file's sha256 matches the index."""
    name = spec_name(spec)
    return model_from_checkpoint(load_checkpoint(PREFIX + name), PREFIX + name).eval()


def create_model(size: str, pretrained: bool | str = False, **overrides) -> nn.Module:
    """A model by size, as timm's `create_model`: `create_model("xxs", num_classes=10)` is a new, random mLiT;
    `pretrained=True` the size's shipped classifier (`mlit-edge pretrained`); `pretrained="xxs-mnist5k-mae"`
    (or any shipped NAME) that model, an MMLiT for a masked auto-encoder. A shipped model takes one override,
    `num_classes`, as timm's do: its body (an mmLiT's encoder) under a fresh head of that many outputs, with a
    one-line notice (`rehead.classifier_from_checkpoint`); the same number keeps a classifier's own head.
    Sizes are case-insensitive, as `new_model`'s are; anything else is a one-line error.
    """
    if not isinstance(size, str):
        raise TypeError(f"create_model: the size is {size!r}; give one of {', '.join(SIZES)}")
    size = size.lower()
    if pretrained == "" or not isinstance(pretrained, (bool, str)):
        raise ValueError(f"create_model: pretrained={pretrained!r}; give True (the size's shipped classifier), a "
                         "shipped NAME (mlit-edge pretrained lists them), or False for random weights")
    if not pretrained:
        return new_model(size, **overrides)
    num_classes = overrides.pop("num_classes", None)
    if overrides:
        raise ValueError(f"create_model: {', '.join(overrides)} cannot change a pretrained model's config; "
                         "only num_classes re-heads it (or fine-tune it: mlit-edge train --checkpoint)")
    if pretrained is True:
        spec = default_for(size)
        if spec is None:
            raise PretrainedError(f"no pretrained classifier of size {size!r} ships (list them with mlit-edge "
                                  "pretrained)")
    else:
        spec = str(pretrained)
        entry = entry_of(spec)
        if entry["size"] != size:
            raise PretrainedError(f"{PREFIX}{spec_name(spec)} is of size {entry['size']!r}, not {size!r}")
    if num_classes is None:
        return load_pretrained(spec)
    spec = PREFIX + spec_name(spec)
    return classifier_from_checkpoint(load_checkpoint(spec), num_classes, spec).eval()
