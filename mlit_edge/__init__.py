"""mlit-edge: very small mixture-of-experts vision transformers (mLiT, mmLiT) for edge GPUs."""
from .config import MAEConfig, MLiTConfig, SIZES, get_config
from .mae import MMLiT, classifier_from_mae
from .model import MLiT, create_model

__version__ = "0.1.0"

__all__ = ["MAEConfig", "MLiTConfig", "SIZES", "get_config", "MLiT", "MMLiT", "create_model",
           "classifier_from_mae", "__version__"]
