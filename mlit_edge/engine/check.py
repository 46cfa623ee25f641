"""`mlit-edge check model.onnx`: will this graph build as a TensorRT engine?

The static checks (`export.graph_check`) run anywhere. Where `tensorrt` or `tensorrt_rtx` imports,
the graph is also parsed and built for real (strongly typed), and the parser's own errors are shown.
"""
from __future__ import annotations

from pathlib import Path

from ..export.graph_check import Report, static_checks
from ..runtime.artifact import BATCH_PROFILE
from ..runtime.trt_env import import_trt
from .plan import BuildOptions, build_serialized


def trt_build(path: str | Path, trt=None, workspace_gib: float = 1.0) -> dict:
    """Parse and build a strongly typed engine; returns layers, build time and engine size, or the
    parser's errors verbatim. Returns the serialized engine under "engine" when the build succeeds."""
    trt = trt or import_trt()
    if trt is None:
        raise RuntimeError("no TensorRT here: pip install 'mlit-edge[trt-check]' (TensorRT-RTX) or use JetPack's")
    result = build_serialized(path, trt, BuildOptions(BATCH_PROFILE, workspace_gib))
    if result["ok"]:
        result["engine_bytes"] = len(result["engine"])
    return result


def check(path: str | Path, build: bool = True) -> Report:
    """Static checks, plus a real TensorRT parse and build where a TensorRT module imports."""
    from ..runtime.schema import SidecarError, check_runtime
    from ..runtime.sidecar import read_sidecar

    rep = static_checks(path)
    try:
        check_runtime(read_sidecar(path, verify_hash=False), "tensorrt", path)
    except FileNotFoundError:
        pass  # a foreign ONNX: the graph alone decides
    except SidecarError as e:
        rep.problems.append(str(e))
        return rep
    trt = import_trt() if build and not rep.onnxruntime_ops else None
    if rep.onnxruntime_ops:
        rep.notes.append("parse and build skipped: TensorRT has no kernels for ONNX Runtime's own ops")
    elif trt is None:
        rep.notes.append("no tensorrt / tensorrt_rtx installed: parse and build skipped "
                         "(pip install 'mlit-edge[trt-check]')")
    else:
        result = trt_build(path, trt)
        result.pop("engine", None)
        rep.build = result
    return rep
