"""The real parse and build of `mlit-edge check`: the graph through the installed TensorRT's ONNX parser and
builder the way that TensorRT builds (engine.plan), in a child process so that a crash in TensorRT on a hostile
graph is a FAIL line of the report, not the end of the command.
"""
from __future__ import annotations

import importlib
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

from ..runtime.artifact import BATCH_PROFILE
from ..base.messages import typed_line
from ..artifacts.targets import of_module
from ..devices.profiles import installed_profile
from ..devices.trt_env import import_trt
from .plan import BuildOptions, build_serialized


def trt_build(path: str | Path, trt=None, workspace_gib: float = 1.0, precision: str = "fp32",
              fp32_layers: tuple[str, ...] = ()) -> dict:
    """Parse and build an engine the way the installed TensorRT builds (strongly typed on TensorRT >= 10 and
    TensorRT-RTX, weakly on 8.x: `devices.profiles.installed_profile`); returns layers, build time and engine
    size, or the parser's errors verbatim. Returns the serialized engine under "engine" when it builds."""

    trt = trt or import_trt()
    if trt is None:
        raise RuntimeError("no TensorRT here: pip install 'mlit-edge[trt-check]' (TensorRT-RTX) or use JetPack's")
    row = of_module(trt.__name__)  # the table's own answer first (TensorRT-RTX builds strongly typed only)
    strongly = row is None or row.strongly_typed_only or installed_profile(trt.__version__).strongly_typed
    result = build_serialized(path, trt, BuildOptions(BATCH_PROFILE, workspace_gib, strongly_typed=strongly,
                                                      precision=precision, fp32_layers=fp32_layers))
    if result["ok"]:
        result["engine_bytes"] = len(result["engine"])
    return result


def _child(argv: list[str]) -> None:
    """The child's side of `build_apart`: argv is the result pipe's fd, the graph, the module, the precision
    and the fp32 layers (JSON); the result, or the error in one line, is written to the pipe as JSON."""
    fd, path, module, precision, layers = int(argv[0]), argv[1], argv[2], argv[3], json.loads(argv[4])
    try:
        result = trt_build(path, importlib.import_module(module), precision=precision, fp32_layers=tuple(layers))
        result.pop("engine", None)
    except Exception as e:  # TensorRT's own exceptions (a shape it refuses) are the build's failure
        result = {"ok": False, "stage": "build", "errors": [typed_line(e, 300)]}
    text = json.dumps(result, default=str)  # whole before any byte is written: the parent reads all or nothing
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        out.write(text)


def build_apart(path: str | Path, trt, precision: str = "fp32", fp32_layers: tuple[str, ...] = ()) -> dict:
    """`trt_build` in a child Python (a fresh process: no CUDA state shared, and no re-import of the caller's
    `__main__`, which multiprocessing's spawn would do), without the engine's bytes: a parser that crashes on a
    hostile graph (TensorRT-RTX 1.7 takes SIGSEGV on some: engine.malformed) ends the child, and the report says
    so in a FAIL line instead of the command dying with it."""
    root = str(Path(__file__).resolve().parents[2])  # this mlit_edge, installed or not
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p)}
    read, write = os.pipe()
    try:
        script = f"import sys; from {__name__} import _child; _child(sys.argv[1:])"
        proc = subprocess.Popen([sys.executable, "-c", script,
                                 str(write), os.fspath(path), trt.__name__, precision, json.dumps(list(fp32_layers))],
                                pass_fds=(write,), stdin=subprocess.DEVNULL, env=env)
    except BaseException:
        os.close(read)
        raise
    finally:
        os.close(write)
    try:
        with os.fdopen(read, "r", encoding="utf-8") as answer:
            text = answer.read()
        code = proc.wait()
    finally:  # Ctrl-C or SIGTERM (cli.common.user_errors) while it builds: the child goes too
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    base = {"module": trt.__name__, "version": trt.__version__}
    try:
        return {**base, **json.loads(text)}
    except ValueError:  # no answer: the child ended first
        how = f"exit status {code}"
        if code < 0:
            try:
                how = f"signal {signal.Signals(-code).name}"
            except ValueError:  # a number Python has no name for
                how = f"signal {-code}"
        return {**base, "ok": False, "stage": "parse",
                "errors": [f"{trt.__name__} ended with {how} while parsing and building this graph (a crash in "
                           "TensorRT itself, on a graph it should refuse)"]}
