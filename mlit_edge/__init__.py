"""mlit-edge: very small mixture-of-experts vision transformers (mLiT, mmLiT) for edge GPUs.

The folders are rooms named for what they hold: the torch-free floor a device installs (`base`, `artifacts`,
`devices`, `runtime`, `stacks`), then the pipeline `model` -> `train` -> `export` -> `engine` -> `bench`, each
importing only the rooms tests/test_layout.py's ALLOWED gives it. The package imports without torch: the
models load on first use of their names.

The Python API is one line per step over the same stage functions the CLI calls (`api`):
`m = mlit_edge.load("pretrained:xxs-mnist5k")`, `onnx = m.export(precision="fp16", jetpack="6.2")`,
`print(mlit_edge.bench([onnx, m]))`, `with mlit_edge.Classifier.load(onnx) as clf: clf.predict(["a.jpg"])`;
`mlit_edge.load("x.onnx")` is that Classifier, and both predict(source=a folder, a glob, a video, a camera ...).
"""
from importlib import import_module

__version__ = "0.1.0"

_LAZY = {"MAEConfig": "model.config", "MLiTConfig": "model.config", "SIZES": "model.config",
         "get_config": "model.config", "MLiT": "model.mlit", "create_model": "train.hub", "MMLiT": "model.mae",
         "classifier_from_mae": "model.mae", "load": "api", "Model": "api", "Artifact": "api",
         "Classifier": "runtime.classifier", "Prediction": "runtime.prediction"}

__all__ = [*_LAZY, "bench", "__version__"]


def __getattr__(name: str):
    if name == "bench":  # the bench package, callable: mlit_edge.bench([...]) is the CLI's bench (bench.call)
        return import_module(".bench", __name__)
    if name in _LAZY:
        return getattr(import_module(f".{_LAZY[name]}", __name__), name)
    raise AttributeError(f"module 'mlit_edge' has no attribute {name!r}")
