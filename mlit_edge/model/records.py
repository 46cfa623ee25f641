"""What an artifact's or a checkpoint's record says of its model: the config it describes and the size
name its files may carry. Export, bench and training read records this one way."""
from __future__ import annotations

from ..base.compat import removesuffix
from .config import SIZES, MLiTConfig, size_label


def record_config(config) -> MLiTConfig:
    """The MLiTConfig an artifact's record describes (its `model.config`; `ArtifactRecord.config`), or the
    default mLiT when the record does not say or says something no config takes: a device has no torch to
    build the model, so a budget is estimated from the record."""
    try:
        return MLiTConfig(**{k: tuple(v) if isinstance(v, list) else v for k, v in dict(config or {}).items()
                             if k in MLiTConfig.__dataclass_fields__})
    except (TypeError, ValueError):
        return MLiTConfig()


def claimed_size(claimed: object, cfg: MLiTConfig) -> str:
    """The size name the files of a checkpoint that claims `claimed` may carry: a registered size (or
    SIZE-custom when `cfg` differs from it), else "custom". The checkpoint's own field goes into no file
    or folder name or message as it is: it may hold a path (`a/../../x`) or terminal escape codes."""
    key = removesuffix(claimed.lower(), "-custom") if isinstance(claimed, str) else None
    return size_label(key, cfg) if key in SIZES else "custom"
