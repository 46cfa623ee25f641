"""One deploy stage in its own process, for benchmarks/deploy_latency.py.

A process that holds other runtimes' idle thread pools measures them, not the stage: so each stage runs in a
worker of its own (`StageProcess`: `python _stage_worker.py FD`, one end of a socket pair) that imports only what
its stage runs (torch for the eager stages, ONNX Runtime or OpenVINO for an artifact), opens it once, and then
waits blocked in `recv` for the parent's next request. `time_rounds` asks one worker at a time, so exactly one
stage computes at any moment, and rotates the order every round so that machine noise hits the stages alike.

A stage is a spec (a dict, so it crosses the pipe): {"kind": "torch", "form": "sparse" | "dense" | "deploy",
"checkpoint", "size"} for the PyTorch model; {"kind": "artifact", "path"} for any artifact the project's own
loader opens (`runtime.artifact.open_artifact`: ONNX Runtime, or whatever runner a target's format has);
{"kind": "openvino", "path", "hint"} for OpenVINO's CPU plugin on an ONNX file as OpenVINO itself runs it. Each
also has "threads".
"""
from __future__ import annotations

import os
import subprocess
import sys
import time
import traceback
from multiprocessing.connection import Connection, Pipe
from pathlib import Path
from typing import Mapping

import numpy as np

from mlit_edge.artifacts.input_convention import graph_feed
from mlit_edge.runtime.runners import Runner, predict_all

WARM_CALLS = 2  # untimed calls that start each round: the caches are cold after another stage ran


class OpenVINORunner(Runner):
    """An ONNX file through OpenVINO's CPU plugin, compiled once per input shape (static shapes, as an
    OpenVINO deployment compiles them). `hint`: the inference precision ("f32"), or None for the plugin's
    default (bf16 on CPUs with AVX512-BF16 or AMX)."""

    name = "openvino"

    def __init__(self, path: Path, threads: int, hint: str | None) -> None:
        super().__init__()
        self.path, self.threads, self.hint = path, threads, hint
        self._requests: dict[tuple, object] = {}

    def activate_impl(self) -> None:
        import openvino

        self._core = openvino.Core()
        self.input_names, self.input_shape, self.output_names = ["images"], (None, 3, 0, 0), ["logits"]
        self.input_dtype = "float32"
        config = {"INFERENCE_NUM_THREADS": self.threads, "PERFORMANCE_HINT": "LATENCY"}
        if self.hint:
            config["INFERENCE_PRECISION_HINT"] = self.hint
        self._config = config
        self.settings = {"capabilities": list(self._core.get_property("CPU", "OPTIMIZATION_CAPABILITIES")),
                         "device": str(self._core.get_property("CPU", "FULL_DEVICE_NAME"))}

    def infer_impl(self, feed: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        x = feed["images"]
        request = self._requests.get(x.shape)
        if request is None:
            model = self._core.read_model(str(self.path))
            model.reshape({"images": list(x.shape)})
            compiled = self._core.compile_model(model, "CPU", self._config)
            self.settings["precision"] = compiled.get_property("INFERENCE_PRECISION_HINT").to_string()
            request = self._requests[x.shape] = compiled.create_infer_request()
        return {"logits": request.infer({0: x})[0]}


def torch_stage(spec: dict) -> Runner:
    """The PyTorch model of `spec["checkpoint"]` (or `spec["size"]`) in `spec["form"]`: the eager model with
    the per-expert dispatch MoE (sparse, the training model's), the eager dense MoE, or `to_deploy`."""
    import torch

    from mlit_edge.export.source import load_for_export
    from mlit_edge.export.static import to_deploy
    from mlit_edge.export.torch_runner import TorchRunner

    class Sparse(torch.nn.Module):
        def __init__(self, model) -> None:
            super().__init__()
            self.model = model

        def forward(self, x):
            return self.model(x, sparse=True)

    model, _ = load_for_export(spec["checkpoint"], spec["size"])
    module = {"sparse": Sparse, "dense": lambda m: m, "deploy": to_deploy}[spec["form"]](model)
    shape = (None, model.cfg.in_chans, model.cfg.img_size, model.cfg.img_size)
    return TorchRunner(module, ["logits"], shape, threads=spec["threads"])


def open_stage(spec: dict, routing: bool = False) -> Runner:
    """The runner of `spec` (not yet open); `routing`: with each layer's expert indices as outputs, where the
    stage's runner can give them."""
    if spec["kind"] == "torch":
        return torch_stage(spec)
    if spec["kind"] == "openvino":
        return OpenVINORunner(Path(spec["path"]), spec["threads"], spec.get("hint"))
    from mlit_edge.runtime.artifact import RunnerOptions, open_artifact

    runner, _ = open_artifact(spec["path"], RunnerOptions(routing=routing, threads=spec["threads"]))
    return runner


def predict(spec: dict, runner: Runner, images: np.ndarray, normalisation, routes: bool):
    """Logits on `images` (normalised with `normalisation`), and each layer's experts where the stage gives
    them: an artifact's loader adds them as outputs, in a second runner closed before any timing (they cost
    time); None where its runner has none."""
    if routes and spec["kind"] == "artifact":
        with open_stage(spec, routing=True) as routed:
            return predict_all(routed, images, routes=bool(routed.route_names), normalised=normalisation)
    return predict_all(runner, images, normalised=normalisation)[0], None


def timed(runner: Runner, feed: dict, min_time: float) -> list[float]:
    """Seconds of each call of one round: `WARM_CALLS` untimed, then calls until `min_time` has passed."""
    for _ in range(WARM_CALLS):
        runner.infer(feed)
    times, end = [], time.perf_counter() + min_time
    while time.perf_counter() < end:
        t0 = time.perf_counter()
        runner.infer(feed)
        times.append(time.perf_counter() - t0)
    return times


def ort_profile(path: str, feed: dict, threads: int, calls: int, top: int = 8) -> list[tuple[str, float, float]]:
    """ONNX Runtime's own profile of the ONNX at `path` on `feed`: (op, share of kernel time, µs per call) of the
    `top` ops (profiling adds its own overhead to every node)."""
    import collections
    import json
    import tempfile

    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads, opts.enable_profiling, opts.log_severity_level = threads, True, 3
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
    by_op: collections.Counter = collections.Counter()
    with tempfile.TemporaryDirectory(prefix="mlit-prof-") as tmp:
        opts.profile_file_prefix = str(Path(tmp) / "ort")
        session = ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"])
        for _ in range(calls):
            session.run(None, feed)
        for e in json.loads(Path(session.end_profiling()).read_text()):
            if e.get("cat") == "Node" and e.get("name", "").endswith("_kernel_time"):
                by_op[e["args"]["op_name"]] += e["dur"]
    total = sum(by_op.values()) or 1
    return [(op, 100 * us / total, us / calls) for op, us in by_op.most_common(top)]


def serve(conn: Connection) -> None:
    """The worker: answer the parent's requests, one at a time, until "close" (or the parent is gone)."""
    spec: dict = {}
    runner: Runner | None = None
    feed: dict = {}
    while True:
        try:
            op, args = conn.recv()  # blocked here, holding no CPU, while the other stages run
        except EOFError:
            return
        try:
            if op == "open":
                spec, runner = args[0], open_stage(args[0])
                runner.open()
                reply = {"pid": os.getpid(), "settings": runner.settings}
            elif op == "feed":  # a batch of normalised images, as this stage's input takes them
                images, normalisation = args
                x = images if normalisation is None else graph_feed(runner.input_name, images, *normalisation,
                                                                   runner.input_dtype)
                feed = {runner.input_name: x}
                timed(runner, feed, 0.0)  # OpenVINO compiles for this shape here
                reply = runner.settings  # what the backend applied (OpenVINO: the precision it compiled)
            elif op == "round":
                reply = timed(runner, feed, *args)
            elif op == "predict":
                reply = predict(spec, runner, *args)
            elif op == "profile":  # an ONNX stage, on the feed of its last rounds
                reply = ort_profile(spec["path"], feed, spec["threads"], *args)
            elif op == "close":
                runner.close()
                conn.send(("ok", None))
                return
            else:
                raise ValueError(f"unknown request {op!r}")
            conn.send(("ok", reply))
        except Exception:  # the parent raises it, with the worker's traceback
            conn.send(("error", traceback.format_exc(limit=-4)))


class StageProcess:
    """The parent's handle on one stage's worker: started and opened with `spec`, then asked one request at
    a time (`call`); `close` ends it."""

    def __init__(self, name: str, spec: dict) -> None:
        self.name = name
        self.conn, theirs = Pipe()
        self.proc = subprocess.Popen([sys.executable, str(Path(__file__).resolve()), str(theirs.fileno())],
                                     pass_fds=(theirs.fileno(),))
        theirs.close()
        try:
            self.info = self.call("open", spec)
        except BaseException:
            self.close()
            raise

    def call(self, op: str, *args):
        """Send one request and wait for its answer; a RuntimeError carries the worker's traceback."""
        self.conn.send((op, args))
        try:
            status, value = self.conn.recv()
        except EOFError:
            raise RuntimeError(f"stage {self.name!r}: its worker died (exit {self.proc.wait()}) during {op}") from None
        if status != "ok":
            raise RuntimeError(f"stage {self.name!r}, {op}: {value}")
        return value

    def close(self) -> int:
        """End the worker; its exit status."""
        try:
            self.conn.send(("close", ()))
            self.conn.recv()
        except (EOFError, OSError):
            pass
        self.conn.close()
        try:
            return self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait()


def time_rounds(stages: Mapping[str, StageProcess], rounds: int, min_time: float,
                settle: float = 0.0) -> dict[str, list[float]]:
    """Per stage, the seconds of each timed call over `rounds` rounds of `min_time` seconds each, asked of
    one worker at a time in an order rotated every round (no stage always runs first or after the same one).
    `settle`: seconds of quiet before each stage's round, for the last stage's thread pool to stop spinning."""
    names = list(stages)
    times: dict[str, list[float]] = {name: [] for name in names}
    for r in range(rounds):
        shift = r % len(names)
        for name in names[shift:] + names[:shift]:
            time.sleep(settle)
            times[name] += stages[name].call("round", min_time)
    return times


if __name__ == "__main__":
    serve(Connection(int(sys.argv[1])))
