"""mlit-edge: very small mixture-of-experts vision transformers (mLiT, mmLiT) for edge GPUs.

The folders are the pipeline: `model` -> `train` -> `export` -> `engine` -> `bench`, each importing
only from the stages before it and from `runtime`, the torch-free floor that a device installs
alone. The package imports without torch: the models load on first use of their names.
"""
from importlib import import_module

__version__ = "0.1.0"

_LAZY = {"MAEConfig": "model.config", "MLiTConfig": "model.config", "SIZES": "model.config",
         "get_config": "model.config", "MLiT": "model.mlit", "create_model": "train.hub", "MMLiT": "model.mae",
         "classifier_from_mae": "model.mae"}

__all__ = [*_LAZY, "__version__"]


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(import_module(f".{_LAZY[name]}", __name__), name)
    raise AttributeError(f"module 'mlit_edge' has no attribute {name!r}")
