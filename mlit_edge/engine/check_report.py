"""`mlit-edge check`'s report: what the check found (`CheckReport`, filled by engine.check), and its text: the
graph's summary, the operator table and fusion predictions, a FAIL line per problem, the notes, the real
build's outcome and the verdict. Each line goes through `printable` on its own: op, node and tensor names
come from the file, and a newline or an escape code in one must neither forge a line of the report nor reach
the terminal.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ..base.messages import printable
from .fusion import format_fusion


@dataclass
class CheckReport:
    """What `check` found: problems fail the check, notes do not."""

    path: str
    opset: int | None = None
    ops: dict[str, int] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    layer_nodes: list[int] = field(default_factory=list)  # ONNX nodes of each encoder layer, in order
    build: dict | None = None  # TensorRT parse/build result, when a TensorRT module is installed
    profile: str | None = None  # the device profile checked against (devices.profiles)
    table: str | None = None  # the operator table's source (onnx-tensorrt branch and commit)
    onnxruntime_ops: dict[str, int] = field(default_factory=dict)  # ops only ONNX Runtime runs (no build is tried)
    fusion: list[dict] = field(default_factory=list)  # per layer: attention vs TensorRT's fusion rules (engine.fusion)
    layernorm: str | None = None  # how LayerNorm is written (engine.fusion.layernorm_form)
    malformed: list[str] = field(default_factory=list)  # not well-formed ONNX (engine.malformed): no parse is tried

    @property
    def ok(self) -> bool:
        return not self.problems and (self.build is None or self.build.get("ok", False))


def format_report(rep: CheckReport) -> str:
    """The report as `mlit-edge check` prints it, every line escaped (`printable`)."""
    lines = [f"{rep.path}: opset {rep.opset}, {sum(rep.ops.values())} nodes, "
             f"ops: {', '.join(f'{k} {v}' for k, v in sorted(rep.ops.items()))}"]
    if rep.layer_nodes:
        per = sorted(set(rep.layer_nodes))
        lines.append(f"  {'/'.join(map(str, per))} nodes per encoder layer x {len(rep.layer_nodes)}, "
                     f"{sum(rep.ops.values()) - sum(rep.layer_nodes)} outside them (patch embedding, head)")
    if rep.table:
        lines.append(f"  checked against {rep.profile}'s operator table: {rep.table} (a prediction from NVIDIA's "
                     "documented table, not a parse by that TensorRT)")
    lines += format_fusion(rep.fusion, rep.layernorm, rep.profile)
    lines += [f"  FAIL {p}" for p in rep.problems]
    lines += [f"  note {n}" for n in rep.notes]
    if rep.build:
        b = rep.build
        if b.get("ok"):
            typed = "strongly" if b.get("flags", {}).get("strongly_typed", True) else "weakly"
            lines.append(f"  {b['module']} {b['version']}: parsed and built a {typed} typed engine: {b['layers']} "
                         f"layers, {b['build_s']} s, {b['engine_bytes'] / 1e6:.2f} MB")
        else:
            lines.append(f"  FAIL {b['module']} {b['version']} {b['stage']} failed:")
            lines += [f"    {e}" for e in b["errors"]]
    lines.append("OK: TensorRT-buildable" if rep.ok else "NOT TensorRT-buildable")
    return "\n".join(map(printable, lines))  # each line escaped apart: a newline in a name forges no line
