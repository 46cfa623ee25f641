"""benchmarks/deploy_latency.py: each stage in a worker process of its own (benchmarks/_stage_worker.py), asked
one request at a time in rotated rounds, and the goal lines it prints from what it measured. No timing is asserted."""
import importlib.util
import os
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("onnxruntime")

from mlit_edge.runtime.runners import OnnxRuntimeRunner, predict_all  # noqa: E402
from tests.helpers import load_file  # noqa: E402

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
NORM = ([0.1307] * 3, [0.3081] * 3)  # the tiny export's recorded preprocessing


@pytest.fixture(scope="module")
def worker():
    return load_file(BENCHMARKS / "_stage_worker.py")


def test_each_stage_runs_its_artifact_in_its_own_process(worker, tiny_onnx):
    """A worker opens its artifact through the project's loader (routing outputs too), an OpenVINO worker runs the
    same ONNX, each answers for the same logits as ONNX Runtime in this process, times its rounds, reports a
    failed request with its traceback and exits cleanly on close."""
    specs = {"ort": {"kind": "artifact", "path": str(tiny_onnx), "threads": 1}}
    if importlib.util.find_spec("openvino"):
        specs["openvino f32"] = {"kind": "openvino", "path": str(tiny_onnx), "hint": "f32", "threads": 1}
    images = np.random.default_rng(0).standard_normal((5, 3, 36, 36)).astype(np.float32)
    with OnnxRuntimeRunner(tiny_onnx) as run:
        want = predict_all(run, images)[0]
    stages = {}
    try:
        for name, spec in specs.items():
            stages[name] = worker.StageProcess(name, spec)
        assert len({s.info["pid"] for s in stages.values()} | {os.getpid()}) == len(stages) + 1
        for name, stage in stages.items():
            logits, routes = stage.call("predict", images, NORM, True)
            np.testing.assert_allclose(logits, want, atol=1e-4, err_msg=name)
            assert (routes is not None) == (name == "ort")  # the artifact's loader exposes each layer's experts
        assert [len(r) for r in stages["ort"].call("predict", images, NORM, True)[1]] == [5, 5, 5]
        for stage in stages.values():
            stage.call("feed", images[:2], NORM)
        times = worker.time_rounds(stages, rounds=3, min_time=0.01)
        assert all(len(t) >= 3 and min(t) > 0 for t in times.values())
        with pytest.raises(RuntimeError, match="(?s)stage 'ort', bogus: .*unknown request 'bogus'"):
            stages["ort"].call("bogus")
    finally:
        codes = [s.close() for s in stages.values()]
    assert codes == [0] * len(specs)


def test_rounds_ask_one_stage_at_a_time_in_rotated_order(worker):
    """Every round asks each stage once, waiting for its answer before the next, and starts one stage later."""
    asked = []

    class Recorder:
        def __init__(self, name: str) -> None:
            self.name = name

        def call(self, op: str, min_time: float) -> list[float]:
            asked.append(self.name)
            return [min_time]

    stages = {n: Recorder(n) for n in "abc"}
    times = worker.time_rounds(stages, rounds=4, min_time=0.5)
    assert "".join(asked) == "abc" "bca" "cab" "abc"
    assert times == {n: [0.5] * 4 for n in "abc"}


def test_goals_are_read_from_the_measured_rows(worker, monkeypatch, capsys):
    """Each goal's figure from the rows and fidelity it is given, PASS or MISS against its target, and n/a with
    why where the run lacks what it needs."""
    monkeypatch.setitem(sys.modules, "_stage_worker", worker)  # the script imports it from beside itself
    monkeypatch.syspath_prepend(str(BENCHMARKS))  # and int8_ort_batch, as when run from its folder
    spec = importlib.util.spec_from_file_location("deploy_latency", BENCHMARKS / "deploy_latency.py")
    bench = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "deploy_latency", bench)  # its dataclass looks its module up there
    spec.loader.exec_module(bench)
    stages = [bench.Stage(bench.FUSED, {}, ours=True), bench.Stage(bench.INT8_ORT, {}, ours=True),
              bench.Stage(bench.DYNAMIC, {}), bench.Stage(bench.OV_DEFAULT, {})]
    speed = {bench.FUSED: 80, bench.INT8_ORT: 100, bench.DYNAMIC: 90, bench.OV_DEFAULT: 125}
    rows = [{"stage": s, "batch": b, "img_per_s": v * b} for s, v in speed.items() for b in (1, 64)]
    routing = {bench.INT8_QDQ: {"routing": [0.99, 0.97, 0.985]}, bench.INT8_ORT: {"routing": [0.99, 0.985]}}
    goals = bench.report_goals(rows, routing, stages)
    assert [(g["pass"], round(g["value"], 3)) for g in goals] == [(False, 0.8), (False, 0.8), (True, 1.111),
                                                                  (True, 1.111), (False, 0.97), (True, 0.985)]
    out = capsys.readouterr().out
    assert f"MISS  (a) our best CPU artifact ({bench.INT8_ORT}) vs {bench.OV_DEFAULT}, batch 64: 0.800" in out
    assert "(c) worst-layer routing agreement with PyTorch, onnxruntime int8 (TensorRT QDQ) (layer 1)" in out
    without = bench.report_goals([r for r in rows if r["stage"] not in (bench.DYNAMIC, bench.OV_DEFAULT)], {}, stages)
    assert [g["pass"] for g in without] == [None] * 6 and all(g["why"] for g in without)
