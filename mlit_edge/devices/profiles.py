"""Device profiles: what each JetPack's TensorRT takes, chosen once per export or build and recorded in
the sidecar.

A Jetson is pinned to the TensorRT of its JetPack for years, so "TensorRT" is a matrix. Its release facts (the
L4T releases, TensorRT, CUDA, Python, pins, container, GPUs) are read from one file, `jetpacks.json` beside
this module, which deploy/install-jetson.sh, mha_rules.JETSON_SM and the docs' tables follow too
(tests/engine/test_jetpack_table.py); its sources are in its "sources". What each TensorRT's ONNX parser reads
is kept here, in PARSER, since it comes from the parser tables, not from a release:

| JetPack | TensorRT | ONNX parser (onnx-tensorrt docs/operators.md)                       | typing |
|---------|----------|---------------------------------------------------------------------|--------|
| 5.1     | 8.5      | 8.5-GA: opset <= 17, no LayerNormalization, TopK's K an initializer | weak   |
| 6.0     | 8.6      | 8.6-GA: opset <= 17, LayerNormalization                             | weak   |
| 6.1/6.2 | 10.3     | 10.1-GA (nearest at or below 10.3): opset 9-20                      | strong |
| 7       | 10.13    | 10.1-GA (nearest at or below)                                       | strong |

Sources: onnx-tensorrt's operator tables per branch (engine/data/onnx_trt_ops.json); NVIDIA/TensorRT's
pybind11 bindings per release branch (engine/data/trt_python_api.json): `NetworkDefinitionCreationFlag`
has EXPLICIT_BATCH and no STRONGLY_TYPED on release/8.5 and release/8.6, both on release/10.3
(docs/trt-sources.md lists the commits). Typing "weak" means EXPLICIT_BATCH, the FP16/INT8 builder flags and
the fp32 layers pinned with OBEY_PRECISION_CONSTRAINTS; "strong" means precision comes from the ONNX alone.

Stdlib only and Python 3.8 syntax: JetPack 5's python3 is 3.8 and imports this module.
"""
from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Dict, Iterable, Optional, Tuple

from ..base.textfile import read_json

if TYPE_CHECKING:  # annotations only: this module stays stdlib-only at run time
    from ..artifacts.schema import ArtifactRecord

# a plain file beside the module (package-data in pyproject.toml): json reads it on any Python, no importlib.resources
TABLE = Path(__file__).with_name("jetpacks.json")


@dataclass(frozen=True)
class DeviceProfile:
    """What one TensorRT release takes, and how an engine is built for it."""

    name: str  # "jetpack-5.1", or "tensorrt-10" for a desktop TensorRT 10 (no JetPack named)
    jetpack: Optional[str]
    l4t: Optional[str]  # the L4T release lines of the JetPack, e.g. "R35.2-R35.6" (jetpacks.json)
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

    def refuse_opset(self, opset: int) -> None:
        """ValueError in one line for an --opset this profile's parser cannot read."""
        if opset > self.max_opset:
            raise ValueError(f"--opset {opset}: {self.describe()}; its parser reads opset {self.max_opset} at most")


# Each JetPack's ONNX parser and network flags (the table above): (max_opset, opset, layernorm, TopK's K an
# initializer, strongly typed). The default opset of a TensorRT 10 graph is 18 (export.DEFAULT_OPSET); 10.x's
# table reads up to 20. A JetPack added to jetpacks.json needs its line here (the import says so otherwise).
PARSER: Dict[str, Tuple[int, int, str, bool, bool]] = {
    "5.1": (17, 17, "decomposed", True, False),  # 8.5-GA: no LayerNormalization; TopK's K an initializer
    "6.0": (17, 17, "native", False, False),  # 8.6-GA: LayerNormalization; release/8.6: no STRONGLY_TYPED
    "6.1": (20, 18, "native", False, True),  # 10.1-GA, release/10.3
    "6.2": (20, 18, "native", False, True),
    "7": (20, 18, "native", False, True),  # 10.1-GA, release/10.13
}


def load_table(path: Path = TABLE) -> Dict[str, dict]:
    """The rows of jetpacks.json by JetPack ("5.1" ... "7"), in the file's order."""
    return read_json(path, "JetPack table")["jetpacks"]


def _release_key(release: str) -> Tuple[int, ...]:
    return tuple(int(part) for part in release.lstrip("R").split("."))


def l4t_lines(releases: Iterable[str]) -> str:
    """The L4T release lines (major.minor) a row's releases cover, runs of three or more as a range:
    R35.2 ... R35.6 -> "R35.2-R35.6"; R38.2, R38.4 -> "R38.2, R38.4"."""
    lines = sorted({_release_key(r)[:2] for r in releases})
    runs = []  # type: list
    for line in lines:
        if runs and runs[-1][-1][0] == line[0] and runs[-1][-1][1] + 1 == line[1]:
            runs[-1].append(line)
        else:
            runs.append([line])
    parts = []
    for run in runs:
        names = [f"R{major}.{minor}" for major, minor in run]
        parts += [f"{names[0]}-{names[-1]}"] if len(names) >= 3 else names
    return ", ".join(parts)


def match_release(l4t: str, table: Dict[str, dict]) -> Optional[Tuple[str, str]]:
    """(JetPack row, JetPack name) of an L4T release such as "R36.4.3", or None where no row lists it: a key
    takes itself and the releases under it ("R35.2" takes R35.2.1), and the longest key wins (the same rule
    install-jetson.sh applies)."""
    best = None  # type: Optional[Tuple[int, str, str]]
    for jetpack, row in table.items():
        for release, name in row["l4t"].items():
            depth = len(release.split("."))
            if (l4t == release or l4t.startswith(release + ".")) and (best is None or depth > best[0]):
                best = (depth, jetpack, name)
    return (best[1], best[2]) if best else None


def _profile(jetpack: str, row: dict) -> DeviceProfile:
    if jetpack not in PARSER:
        raise ValueError(f"jetpacks.json has JetPack {jetpack}, and devices/profiles.py PARSER has no parser facts "
                         "for it (opset, LayerNorm, TopK, typing): add its line")
    max_opset, opset, layernorm, topk, strong = PARSER[jetpack]
    return DeviceProfile(f"jetpack-{jetpack}", jetpack, l4t_lines(row["l4t"]), row["tensorrt_major_minor"],
                         row["cuda"], max_opset, opset, layernorm, topk, strong)


JETPACK_TABLE = load_table()
PROFILES: Dict[str, DeviceProfile] = {p.name: p for p in (
    *(_profile(jetpack, row) for jetpack, row in JETPACK_TABLE.items()),
    DeviceProfile("tensorrt-10", None, None, "10", None, 20, 18, "native", False, True),
)}
DEFAULT = "tensorrt-10"  # no JetPack named: today's graph, for TensorRT 10.x and TensorRT-RTX
JETPACKS = tuple(p.jetpack for p in PROFILES.values() if p.jetpack)  # the --jetpack choices
# the --tensorrt aliases: each JetPack TensorRT's major.minor -> the newest JetPack that ships it (10.3: 6.2's)
TENSORRTS: Dict[str, str] = {p.tensorrt: p.name for p in PROFILES.values() if p.jetpack}


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


def recorded_profile(record: ArtifactRecord) -> Optional[DeviceProfile]:
    """The device profile a sidecar records (its `profile` object, by name); None where it records none (made
    before profiles were recorded); a one-line ValueError naming the value for anything else (`profile: 5`)."""
    value = record.profile_field
    if value is None:
        return None
    name = value.get("name") if isinstance(value, dict) else None
    if not isinstance(name, str) or name not in PROFILES:
        shown = repr(name if isinstance(value, dict) else value)
        raise ValueError(f"its sidecar's profile {shown[:80]} is not a device profile this mlit-edge knows "
                         f"(expected an object named one of {', '.join(PROFILES)}); rebuild it with this version")
    return PROFILES[name]


def contradiction(profile: DeviceProfile, opset: Optional[int], ops: Iterable[str]) -> Optional[str]:
    """Why a graph of default-domain `opset` and `ops` cannot have been made for `profile` (its parser reads
    neither a newer opset nor, on 8.5, LayerNormalization: the PARSER table above); None when it can."""
    if opset is not None and opset > profile.max_opset:
        return (f"the graph is opset {opset}, and {profile.name}'s TensorRT {profile.tensorrt} parser reads "
                f"{profile.max_opset} at most")
    if profile.layernorm == "decomposed" and "LayerNormalization" in set(ops):
        return (f"the graph holds LayerNormalization, which {profile.name}'s TensorRT {profile.tensorrt} parser "
                "lacks (its exports decompose it)")
    return None
