"""The keys timm and the Hugging Face hub read from a `config.json` (`architecture`, `num_classes`, `num_features`,
`label_names`, `pretrained_cfg`), derived from mlit-edge's own fields (`config`, `data`), which stay the truth.

What timm does with them (timm/models/_hub.py, `_parse_model_cfg`, and timm/models/_builder.py,
`resolve_pretrained_cfg`, which builds its `PretrainedCfg` dataclass from `pretrained_cfg`, so no other key may
sit there), and what timm/data/config.py `resolve_data_config` then takes for preprocessing: `input_size`,
`interpolation`, `mean`, `std`, `crop_pct`, `crop_mode`. The values are the ones mlit-edge itself uses
(artifacts/preprocess.py): the whole image resized to the model's square size by antialiased bilinear filtering,
aspect ratio not kept and nothing cropped, which is timm's `crop_mode="squash"` at `crop_pct=1.0`.

A config that carries these keys is read back only when they agree with its own fields (`timm_problem`): an edit
to one view that the other does not share (a renamed class in `label_names` only) is refused, not half applied.
"""
from __future__ import annotations

from typing import Any

from ..base.messages import printable
from ..model.config import SIZES

TIMM_KEYS = ("architecture", "num_classes", "num_features", "label_names", "pretrained_cfg")
INTERPOLATION = "bilinear"  # artifacts/preprocess.py resize_weights: a triangle filter, PIL's antialiased BILINEAR
CROP_PCT = 1.0  # preprocess resizes the whole image: no border is cropped away
CROP_MODE = "squash"  # each side scaled to the size on its own (timm/data/transforms_factory.py, 'squash')
LICENSE = "apache-2.0"  # pyproject.toml's: the weights are the project's own runs
# the pretrained_cfg values that change what a model computes or how its input is made: checked on read;
# the rest (first_conv, classifier, license) only describe it
CHECKED = ("input_size", "interpolation", "crop_pct", "crop_mode", "mean", "std", "num_classes")


def architecture(fields: dict) -> str:
    """`mlit_xxs`, `mmlit_xxs`, `mlit_xxs-custom`: the kind and the registered size a checkpoint claims; `custom`
    where its `size` is none (the field may hold anything, and this name is shown to users and hubs)."""
    size = fields.get("size")
    key = size.lower() if isinstance(size, str) else ""
    known = key in SIZES or (key.endswith("-custom") and key[:-len("-custom")] in SIZES)
    return f"{fields['kind']}_{key if known else 'custom'}"


def timm_keys(fields: dict) -> dict[str, Any]:
    """timm's keys for a checkpoint's `fields` (kind, size, config, data, as `config.json` holds them), in the order
    timm's `save_config_for_hf` writes them. An mmLiT is its encoder without a head: `num_classes` 0, no labels."""
    mae = fields["kind"] == "mmlit"
    cfg, data = fields["config"]["encoder"] if mae else fields["config"], fields["data"]
    classes = 0 if mae else cfg["num_classes"]
    prefix = "encoder." if mae else ""
    pretrained_cfg = {"input_size": [cfg["in_chans"], cfg["img_size"], cfg["img_size"]],
                      "fixed_input_size": True,  # static shapes: the position table is of one grid
                      "interpolation": INTERPOLATION, "crop_pct": CROP_PCT, "crop_mode": CROP_MODE,
                      "mean": list(data["mean"]), "std": list(data["std"]), "num_classes": classes,
                      "pool_size": None, "first_conv": f"{prefix}patch_embed",
                      "classifier": "head" if classes else None, "license": LICENSE}
    keys = {"architecture": architecture(fields), "num_classes": classes, "num_features": cfg["dim"]}
    if classes:
        keys["label_names"] = list(data["classes"])
    return {**keys, "pretrained_cfg": pretrained_cfg}


def _short(value: object) -> str:
    text = printable(repr(value))
    return text if len(text) <= 80 else text[:77] + "..."


def timm_problem(config: dict) -> str | None:
    """Where the timm keys of a `config.json` disagree with its own fields (None when they agree, when it has
    none, or when its own fields are too malformed to derive them: the checkpoint's checks name that)."""
    if not any(k in config for k in TIMM_KEYS):
        return None  # written before the keys existed
    try:
        want = timm_keys(config)
    except (KeyError, TypeError, IndexError, AttributeError):
        return None
    have_cfg = config.get("pretrained_cfg")
    if "pretrained_cfg" in config and not isinstance(have_cfg, dict):
        return f"pretrained_cfg is {_short(have_cfg)}, not an object"
    pairs = [(k, config[k], want.get(k)) for k in ("num_classes", "num_features", "label_names") if k in config]
    pairs += [(f"pretrained_cfg.{k}", have_cfg[k], want["pretrained_cfg"][k]) for k in CHECKED
              if isinstance(have_cfg, dict) and k in have_cfg]
    for key, have, made in pairs:
        if have != made:
            return f"{key} is {_short(have)} where its own fields (config, data) make {_short(made)}"
    return None
