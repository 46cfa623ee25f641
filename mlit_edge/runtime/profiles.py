"""Device profiles: what each JetPack's TensorRT takes, chosen once per export or build and recorded in
the sidecar.

A Jetson is pinned to the TensorRT of its JetPack for years, so "TensorRT" is a matrix:

| JetPack | L4T  | TensorRT | CUDA | ONNX parser (onnx-tensorrt docs/operators.md)          | typing |
|---------|------|----------|------|--------------------------------------------------------|--------|
| 5.1     | R35  | 8.5.2    | 11.4 | 8.5-GA: opset <= 17, no LayerNormalization, TopK's K an initializer | weak  |
| 6.0     | R36.3| 8.6.2    | 12.2 | 8.6-GA: opset <= 17, LayerNormalization                 | weak   |
| 6.1/6.2 | R36.4| 10.3     | 12.6 | 10.1-GA (nearest at or below 10.3): opset 9-20          | strong |
| 7       | R38  | 10.13    | 13.0 | 10.1-GA (nearest at or below)                            | strong |

Sources: OE4T/meta-tegra's TensorRT/CUDA recipes and dusty-nv/jetson-containers' l4t_version.py for
the versions; onnx-tensorrt's operator tables per branch (engine/data/onnx_trt_ops.json); NVIDIA/TensorRT's
pybind11 bindings per release branch (engine/data/trt_python_api.json): `NetworkDefinitionCreationFlag`
has EXPLICIT_BATCH and no STRONGLY_TYPED on release/8.5 and release/8.6, both on release/10.3
(docs/trt-sources.md lists the commits). Typing "weak" means EXPLICIT_BATCH, the FP16/INT8 builder flags and
the fp32 layers pinned with OBEY_PRECISION_CONSTRAINTS; "strong" means precision comes from the ONNX alone.

Stdlib only and Python 3.8 syntax: JetPack 5's python3 is 3.8 and imports this module.
"""
from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from typing import Dict, Optional, Tuple


@dataclass(frozen=True)
class DeviceProfile:
    """What one TensorRT release takes, and how an engine is built for it."""

    name: str  # "jetpack-5.1", or "tensorrt-10" for a desktop TensorRT 10 (no JetPack named)
    jetpack: Optional[str]
    l4t: Optional[str]
    tensorrt: str  # major.minor
    cuda: Optional[str]
    max_opset: int  # the newest opset its ONNX parser reads
    opset: int  # the opset its exports are written at
    layernorm: str  # "native": the LayerNormalization op; "decomposed": primitive ops (no parser support)
    topk_k_initializer: bool  # the parser wants TopK's K as an initializer, not a Constant node's output
    strongly_typed: bool  # build strongly typed (TensorRT >= 10), else weakly with builder flags

    def record(self) -> dict:
        """The sidecar's `profile` field."""
        return asdict(self)

    def describe(self) -> str:
        where = f"JetPack {self.jetpack} (L4T {self.l4t}), " if self.jetpack else ""
        return (f"{self.name}: {where}TensorRT {self.tensorrt}, opset {self.opset}, LayerNorm {self.layernorm}, "
                f"{'strongly' if self.strongly_typed else 'weakly'} typed")


def _p(name, jetpack, l4t, trt, cuda, max_opset, opset, layernorm, topk, strong) -> DeviceProfile:
    return DeviceProfile(name, jetpack, l4t, trt, cuda, max_opset, opset, layernorm, topk, strong)


# the default opset of a TensorRT 10 graph: 18 (export.DEFAULT_OPSET); 10.x's table reads up to 20
PROFILES: Dict[str, DeviceProfile] = {p.name: p for p in (
    _p("jetpack-5.1", "5.1", "R35", "8.5", "11.4", 17, 17, "decomposed", True, False),
    _p("jetpack-6.0", "6.0", "R36.3", "8.6", "12.2", 17, 17, "native", False, False),
    _p("jetpack-6.1", "6.1", "R36.4", "10.3", "12.6", 20, 18, "native", False, True),
    _p("jetpack-6.2", "6.2", "R36.4", "10.3", "12.6", 20, 18, "native", False, True),
    _p("jetpack-7", "7", "R38", "10.13", "13.0", 20, 18, "native", False, True),
    _p("tensorrt-10", None, None, "10", None, 20, 18, "native", False, True),
)}
DEFAULT = "tensorrt-10"  # no JetPack named: today's graph, for TensorRT 10.x and TensorRT-RTX
JETPACKS = tuple(p.jetpack for p in PROFILES.values() if p.jetpack)  # the --jetpack choices
TENSORRTS = {"8.5": "jetpack-5.1", "8.6": "jetpack-6.0", "10.3": "jetpack-6.2", "10.13": "jetpack-7"}  # aliases


def trt_major_minor(version: str) -> Tuple[int, int]:
    """"8.5.2.2", "10.3.0.30", "10.13" -> (major, minor); a one-line ValueError for anything else (the one
    runtime's parser of TensorRT versions; engine.trt_sources keeps the same rule in its own
    `parse_version` because it loads standalone, as a file, under JetPack 5's Python 3.8)."""
    found = re.match(r"^\s*v?(\d+)\.(\d+)(?:[.\-+\w]*)\s*$", str(version))
    if not found:
        raise ValueError(f"not a TensorRT version: {version!r} (expected e.g. '8.6.2' or '10.3.0.30')")
    return int(found.group(1)), int(found.group(2))


def named_profile(jetpack: Optional[str] = None, tensorrt: Optional[str] = None) -> Optional[DeviceProfile]:
    """The profile `--jetpack X` (or its alias `--tensorrt Y`) names; None when neither is given."""
    if jetpack and tensorrt:
        by_jetpack, by_tensorrt = named_profile(jetpack=jetpack), named_profile(tensorrt=tensorrt)
        if by_jetpack is None or by_tensorrt is None or by_jetpack.tensorrt != by_tensorrt.tensorrt:
            raise ValueError(f"--jetpack {jetpack} and --tensorrt {tensorrt} name different TensorRTs; give one")
        return by_jetpack
    if jetpack:
        if f"jetpack-{jetpack}" not in PROFILES:
            raise ValueError(f"--jetpack {jetpack!r}: choose from {', '.join(JETPACKS)}")
        return PROFILES[f"jetpack-{jetpack}"]
    if tensorrt:
        if tensorrt not in TENSORRTS:
            raise ValueError(f"--tensorrt {tensorrt!r}: choose from {', '.join(TENSORRTS)} (JetPack's TensorRTs)")
        return PROFILES[TENSORRTS[tensorrt]]
    return None


def installed_profile(trt_version: str) -> DeviceProfile:
    """The profile of an installed TensorRT: its JetPack's where one ships that major.minor (10.3: JetPack
    6.2's, the same TensorRT as 6.1's), else the generic TensorRT 10 profile; refused before 8.5."""
    major, minor = trt_major_minor(trt_version)
    for version, name in TENSORRTS.items():
        if trt_major_minor(version) == (major, minor):
            return PROFILES[name]
    if major >= 10:
        return PROFILES[DEFAULT]
    raise ValueError(f"TensorRT {trt_version}: mlit-edge builds for TensorRT 8.5, 8.6 and 10.x (JetPack 5.1 to 7)")


def choose(named: Optional[DeviceProfile], trt_version: Optional[str]) -> DeviceProfile:
    """The profile of a build, chosen once: where TensorRT imports (`trt_version`, the device) the installed
    one decides, and a flag that names another TensorRT is refused in one line; elsewhere the flag, or the
    TensorRT 10 default."""
    if trt_version is None:
        return named or PROFILES[DEFAULT]
    installed = installed_profile(trt_version)
    if named is None:
        return installed
    if named.name != DEFAULT and trt_major_minor(named.tensorrt) != trt_major_minor(trt_version):
        raise ValueError(f"--jetpack {named.jetpack} is TensorRT {named.tensorrt}, but this machine's TensorRT is "
                         f"{trt_version} ({installed.name}); drop the flag, or build on a JetPack {named.jetpack} device")
    return named


def parses(made_for: DeviceProfile, parser: DeviceProfile) -> bool:
    """Whether an ONNX made for `made_for` is one that `parser`'s TensorRT reads: an older profile's graph
    (lower opset, LayerNorm decomposed, K an initializer) is valid for a newer parser; a newer one's is not."""
    return (made_for.opset <= parser.max_opset
            and (made_for.layernorm == "decomposed" or parser.layernorm == "native")
            and (made_for.topk_k_initializer or not parser.topk_k_initializer))


def profile_named(name: Optional[str]) -> DeviceProfile:
    """The profile an artifact's sidecar names (`ArtifactRecord.profile`); TensorRT 10's for an artifact
    made before profiles were recorded."""
    if name is None:
        return PROFILES[DEFAULT]
    if name not in PROFILES:
        raise ValueError(f"its sidecar names the device profile {name!r}, which this mlit-edge does not know; "
                         "rebuild it with this version")
    return PROFILES[name]
