"""mlit-edge: very small mixture-of-experts vision transformers (mLiT, mmLiT) for edge GPUs.

The package imports without torch: the models load on first use of their names, so the embedded
runtime (`mlit_edge.runtime`) runs on a device that has numpy and TensorRT or ONNX Runtime only.
"""
from importlib import import_module

__version__ = "0.1.0"

_LAZY = {"MAEConfig": "config", "MLiTConfig": "config", "SIZES": "config", "get_config": "config",
         "MLiT": "model", "create_model": "model", "MMLiT": "mae", "classifier_from_mae": "mae"}

__all__ = [*_LAZY, "__version__"]


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(import_module(f".{_LAZY[name]}", __name__), name)
    raise AttributeError(f"module 'mlit_edge' has no attribute {name!r}")
