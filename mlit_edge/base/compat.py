"""What differs between the installs the package runs on.

Python: what the device side needs from Python 3.9+, for JetPack 5's Python 3.8 (`tests/test_py38.py` checks
every module a device imports): `str.removesuffix` and `PurePath.is_relative_to`, written out.

Dependencies: the one way to import a heavy optional one (`HEAVY`, `heavy`) is an `import` statement inside the
function that needs it, never at a module's top, so that a device (no torch, no onnx tooling) and a CPU-only
install import every module they use, and `mlit-edge` starts without loading them. Everything else is imported at the
module's top: the standard library, numpy, click, and the package's own modules, with two exceptions that
follow from the same reason:
  - a package module that imports a `HEAVY` name at its top (`train.*` and `model.mlit` import torch) is heavy
    too: a module a device imports reaches it only inside a function, as `export.source` reaches the
    checkpoint readers;
  - a module an entry point loads reaches a package module that entry point does not otherwise load inside
    the function that needs it: `mlit-edge` defers each command's stage, so `--help` and every command load
    only what they run, and a device's build, runtime and bench defer what would add a module to the set a
    device imports (`tests/test_py38.py`).
An `import` under `if TYPE_CHECKING:` is for the type checker and never runs. `tests/test_imports.py` holds the
package to this rule."""
from __future__ import annotations

from pathlib import PurePath

# The optional dependencies, by top-level module name: what the device install (deploy/install-jetson.sh) or a
# CPU-only workstation lacks. Pillow ships with the device but stays optional there (the runtime classifies
# uint8 arrays without it), and a plain `mlit-edge` start does not decode images.
HEAVY = frozenset({
    "torch", "torchvision", "torch_tensorrt",  # the workstation's (training, export)
    "onnx", "onnxscript", "onnxconverter_common",  # the ONNX tooling: export, checks, graph edits
    "onnxruntime",  # optional on a device (WITH_ORT=1)
    "tensorrt", "cuda",  # a device's JetPack, or the gpu / trt-check extras; TensorRT-RTX too (`heavy`)
    "cv2", "openvino", "matplotlib", "safetensors", "tqdm", "PIL",
    "tritonclient", "google",  # the triton extra (google.protobuf)
})


def heavy(module: str) -> bool:
    """Whether importing `module` (a dotted name) loads a `HEAVY` dependency: TensorRT's other builds
    (TensorRT-RTX, tensorrt_libs) count by their prefix, since the target table names them."""
    root = module.split(".")[0]
    return root in HEAVY or root.startswith("tensorrt")


def removesuffix(text: str, suffix: str) -> str:
    """`text.removesuffix(suffix)` (Python 3.9+): `text` without `suffix` at its end, else `text` unchanged."""
    return text[:-len(suffix)] if suffix and text.endswith(suffix) else text


def is_relative_to(path: PurePath, other: PurePath) -> bool:
    """`path.is_relative_to(other)` (Python 3.9+): whether `other` is `path` or one of its parents."""
    try:
        path.relative_to(other)
    except ValueError:
        return False
    return True
