"""`mlit-edge build --target openvino`: an OpenVINO IR built from the export, opened by the one artifact loader, predicting
what ONNX Runtime predicts from the same export, and refused in one line where its sidecar does not hold."""
import json

import numpy as np
import pytest

from mlit_edge.artifacts.sidecar import SidecarError
from mlit_edge.engine.ov_build import choose_hint
from mlit_edge.export.requests import BuildRequest
from mlit_edge.runtime import ov_runner
from mlit_edge.runtime.artifact import RunnerOptions, open_artifact
from mlit_edge.runtime.runners import OnnxRuntimeRunner, predict_all, with_routing_outputs
from tests.helpers import run_cli

pytest.importorskip("openvino")


@pytest.fixture(scope="module")
def ir(tiny_onnx, tmp_path_factory):
    """A tiny random mLiT's portable fp32 export built for OpenVINO at fp32 (the f32 hint), through the CLI."""
    out = tmp_path_factory.mktemp("ov")
    run_cli("build", "--onnx", tiny_onnx, "--target", "openvino", "--precision", "fp32", "--out", out)
    (xml,) = out.glob("*.xml")
    return xml, tiny_onnx


def record_of(xml):
    return json.loads(xml.with_name(xml.name + ".json").read_text())


def test_the_ir_predicts_what_onnx_runtime_predicts_and_routes_alike(ir):
    xml, onnx = ir
    assert xml.with_suffix(".bin").is_file() and not list(xml.parent.glob(".*"))  # no temporary left behind
    assert record_of(xml)["source_onnx"] == onnx.name
    x = np.random.default_rng(0).standard_normal((5, 3, 36, 36)).astype(np.float32)
    runner, record = open_artifact(xml, RunnerOptions(routing=True, threads=1))
    assert record.runtime == "openvino" and record.target == "openvino" and record.precision == "fp32"
    assert record.raw["openvino"]["inference_precision"] == "f32"
    with runner:
        got, routes = predict_all(runner, x, batch=2, routes=True)  # two compiled shapes: 2 and the last 1
        assert runner.settings["inference_precision"] == "f32"  # what the plugin compiled, in the hint's words
    with OnnxRuntimeRunner(onnx, expose_routing=True) as ort:
        want, want_routes = predict_all(ort, x, routes=True)
    assert np.abs(got - want).max() <= 1e-4
    assert len(routes) == len(want_routes) == 3
    assert all(np.array_equal(np.sort(a, -1), np.sort(b, -1)) for a, b in zip(routes, want_routes))
    assert len(with_routing_outputs(onnx)[1]) == 3


def test_a_precision_this_cpu_lacks_is_refused_at_load_in_one_line(ir, monkeypatch):
    xml, _ = ir
    sidecar = xml.with_name(xml.name + ".json")
    data = json.loads(sidecar.read_text())
    data["openvino"]["inference_precision"] = "bf16"
    sidecar.write_text(json.dumps(data))
    monkeypatch.setattr(ov_runner, "cpu_capabilities", lambda core: ["FP32", "INT8"])
    try:
        with pytest.raises(SidecarError, match=r"compute in bf16, which this CPU's OpenVINO plugin lacks") as e:
            open_artifact(xml)
        assert "\n" not in str(e.value) and "--precision fp32" in str(e.value)
    finally:
        data["openvino"]["inference_precision"] = "f32"
        sidecar.write_text(json.dumps(data))


def test_changed_weights_are_refused_before_openvino_reads_them(ir, tmp_path):
    xml, _ = ir
    copy = tmp_path / xml.name
    for f in (xml, xml.with_suffix(".bin"), xml.with_name(xml.name + ".json")):
        (tmp_path / f.name).write_bytes(f.read_bytes())
    weights = bytearray(copy.with_suffix(".bin").read_bytes())
    weights[-1] ^= 1
    copy.with_suffix(".bin").write_bytes(bytes(weights))
    with pytest.raises(SidecarError, match=r"\.bin does not match .*sha256 of the IR's weights"):
        open_artifact(copy)


def test_the_half_precision_takes_the_type_the_cpu_has_and_int8_is_not_offered():
    assert choose_hint(("bf16", "f16"), ["BF16", "FP32"], "fp16") == "bf16"
    assert choose_hint(("bf16", "f16"), ["FP16", "FP32"], "fp16") == "f16"
    with pytest.raises(ValueError, match="offers neither .* build --precision fp32"):
        choose_hint(("bf16", "f16"), ["FP32", "INT8"], "fp16")
    with pytest.raises(ValueError, match="builds fp32 and fp16, not int8"):
        BuildRequest(target="openvino", precision="int8")
