"""Stand-ins for each JetPack's `tensorrt` and `cuda-python`, so every device path of mlit-edge *runs* here.

    from tests.standins import install
    jp = install(monkeypatch, "jetpack-5.1")     # TensorRT 8.5 (release/8.5's bindings) + cuda-python 11.8.2
    run_build(BuildRequest(onnx=..., target="tensorrt", ...))   # the real code, through the stand-ins
    jp.device.events                             # what the stand-ins saw

`tensorrt` is generated from NVIDIA/TensorRT's pybind11 bindings of the release branch the JetPack ships
(names, argument lists, read-only properties, enum members: tensorrt.py), and the CUDA runtime from the
cuda-python wheel that JetPack's install pins (signatures, return arities, enums and import paths:
cudart.py). Both enforce the preconditions NVIDIA documents; a stand-in that accepts what the real library
refuses is a defect. The JetPack -> (branch, TensorRT, cuda-python, CUDA) rows are read from the project's
device table (mlit_edge/devices/jetpacks.json), never restated here.
"""
from __future__ import annotations

import importlib.machinery
import json
import sys
import types
from dataclasses import dataclass

from .cudart import DATA as CUDA_DATA, make_module
from .device import Device
from .tensorrt import StandIn

def _jetpacks() -> dict:
    """profile -> (TensorRT release branch, the TensorRT JetPack ships, cuda-python pin's major.minor, CUDA as
    cudaDriverGetVersion answers it), read from the one device table (mlit_edge/devices/jetpacks.json); 6.1 and 6.2
    share a TensorRT, so 6.2 stands for both."""
    from mlit_edge.devices.profiles import load_table

    out = {}
    for jetpack, row in load_table().items():
        if jetpack == "6.1":
            continue
        pin = row["pins"]["cuda-python"].split("==")[-1].split(">=")[-1].split(",")[0]
        major, minor = (int(x) for x in row["cuda"].split(".")[:2])
        out[f"jetpack-{jetpack}"] = (f"release/{row['tensorrt_major_minor']}", row["tensorrt"],
                                     ".".join(pin.split(".")[:2]), major * 1000 + minor * 10)
    return out


JETPACKS = _jetpacks()


@dataclass
class StandIns:
    profile: str
    device: Device
    trt: StandIn
    cudart: types.ModuleType
    cuda_python: str


def cuda_python_version(prefix: str) -> str:
    versions = json.loads(CUDA_DATA.read_text())["versions"]
    found = sorted((v for v in versions if v == prefix or v.startswith(prefix + ".")),
                   key=lambda v: tuple(int(x) if x.isdigit() else -1 for x in v.split(".")))
    if not found:
        raise KeyError(f"no cuda-python {prefix}.x in {CUDA_DATA}")
    return found[-1]


def install(monkeypatch, profile: str = "jetpack-5.1", dla_cores: int = 2) -> StandIns:
    """Put the stand-ins of `profile` in sys.modules (as `tensorrt`, and `cuda.cudart` and/or
    `cuda.bindings.runtime` as that cuda-python provides), undone by `monkeypatch` at the test's end."""
    branch, version, prefix, cuda = JETPACKS[profile]
    cp = cuda_python_version(prefix)
    device = Device(runtime_version=cuda, dla_cores=dla_cores)
    trt = StandIn(branch, version, device)
    for name in [n for n in sys.modules if n == "cuda" or n.startswith("cuda.") or n in ("tensorrt", "tensorrt_rtx")]:
        monkeypatch.delitem(sys.modules, name)
    for module in (trt.module, cuda_pkg := types.ModuleType("cuda")):
        module.__spec__ = importlib.machinery.ModuleSpec(module.__name__, None, is_package=module is cuda_pkg)
    monkeypatch.setitem(sys.modules, "tensorrt", trt.module)
    modules = json.loads(CUDA_DATA.read_text())["versions"][cp]["modules"]
    cuda_pkg.__path__ = []  # a package: submodules this version lacks fail to import, as they do there
    if any(m == "cuda.cudart" for m in modules) and not cp.startswith("12.6"):
        cuda_pkg.__version__ = cp  # 11.8.2 and 12.2.1: cuda/_version.py (12.6 warns, 13.0 has no cuda/__init__)
    monkeypatch.setitem(sys.modules, "cuda", cuda_pkg)
    runtime = None
    for path in modules:
        runtime = runtime or make_module(cp, device, path)
        runtime.__spec__ = importlib.machinery.ModuleSpec(path, None)
        parent, _, leaf = path.rpartition(".")
        if parent != "cuda":
            pkg = sys.modules.get(parent) or types.ModuleType(parent)
            pkg.__path__ = []
            pkg.__version__ = cp  # cuda.bindings.__version__ (cuda/bindings/_version.py)
            monkeypatch.setitem(sys.modules, parent, pkg)
            setattr(cuda_pkg, parent.split(".")[1], pkg)
        monkeypatch.setitem(sys.modules, path, runtime)
        monkeypatch.setattr(sys.modules[parent], leaf, runtime, raising=False)
    return StandIns(profile, device, trt, runtime, cp)
