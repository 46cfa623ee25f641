"""Hostile round 4 (issue 47), the check surface, through the Python API: `check` returns a report (never
raises) on every degenerate graph of tests/hostile_r4_check.py; a TensorRT that crashes or raises in the
parse is a FAIL line; what TensorRT logs and what the report prints are escaped; the UINT8 rule and the
profile rules, each in their one place. The CLI replays are in tests/hostile_r4_check.py."""
from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

pytest.importorskip("onnx")

from mlit_edge.engine.check import CheckReport, check, format_report  # noqa: E402
from tests.hostile_r4_check import ESC, degenerate, graph  # noqa: E402


@pytest.mark.parametrize("what", list(degenerate()))
def test_check_reports_every_degenerate_graph_and_never_hands_it_to_the_parser(what, tmp_path):
    model, phrase = degenerate()[what]
    path = tmp_path / "g.onnx"
    path.write_bytes(model if isinstance(model, bytes) else model.SerializeToString())
    rep = check(path)  # a TensorRT that imports would crash on two of them: it is never reached
    assert not rep.ok and rep.malformed and any(phrase in p for p in rep.problems), rep.problems
    assert rep.build is None and any("not well-formed ONNX" in n for n in rep.notes), rep.notes
    text = format_report(rep)
    assert f"  FAIL {rep.problems[0]}" in text.splitlines() and text.endswith("NOT TensorRT-buildable")


def _fake_trt(folder: Path, name: str, body: str) -> SimpleNamespace:
    """A module `name` in `folder` whose ILogger's constructor runs `body` (the first TensorRT call a build
    makes), importable by the child `check` builds in."""
    (folder / f"{name}.py").write_text(f"import os, signal\n__version__ = '0.1'\n\nclass ILogger:\n    ERROR = 1\n\n"
                                       f"    def __init__(self):\n        {body}\n")
    return SimpleNamespace(__name__=name, __version__="0.1")


@pytest.mark.parametrize("body,stage,said", [
    ("os.kill(os.getpid(), signal.SIGSEGV)", "parse", "ended with signal SIGSEGV while parsing and building"),
    ("raise RuntimeError('the profile is refused')", "build", "RuntimeError: the profile is refused"),
])
def test_a_tensorrt_that_crashes_or_raises_is_a_fail_line_not_the_end_of_check(body, stage, said, tmp_path,
                                                                               monkeypatch):
    from mlit_edge.engine.check_build import build_apart

    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    path = tmp_path / "g.onnx"
    path.write_bytes(graph([]).SerializeToString())
    result = build_apart(path, _fake_trt(tmp_path, "crashing_trt", body))
    assert result["ok"] is False and result["stage"] == stage and said in result["errors"][0], result
    rep = CheckReport(str(path), build=result)
    lines = format_report(rep).splitlines()
    assert f"  FAIL crashing_trt 0.1 {stage} failed:" in lines and lines[-1] == "NOT TensorRT-buildable"


def test_what_tensorrt_logs_reaches_the_terminal_escaped_a_line_each(capsys):
    from mlit_edge.engine.plan import _logger

    class ILogger:
        INTERNAL_ERROR, ERROR, WARNING = 0, 1, 2

        def __init__(self):
            pass

    log = _logger(SimpleNamespace(ILogger=ILogger))
    log.log(ILogger.ERROR, f"While parsing node [Evil{ESC} -> y]:\nNode name: x")
    log.log(ILogger.WARNING, f"a warning{ESC}")  # below ERROR: not printed, as trt.Logger(ERROR) would not
    err = capsys.readouterr().err
    assert "\x1b" not in err and "\x07" not in err
    assert err.splitlines() == ["[TRT] [E] While parsing node [Evil\\x1b]0;pwned\\x07\\x1b[2J -> y]:",
                                "[TRT] [E] Node name: x"]


def test_the_report_escapes_every_line_and_a_name_forges_none():
    rep = CheckReport("m\x1b[31m.onnx", opset=18, ops={f"Relu{ESC}": 1},
                 problems=[f"TopK 'x{ESC}\nOK: TensorRT-buildable': K holds 2 values"])
    lines = format_report(rep).splitlines()
    assert not any("\x1b" in line or "\x07" in line for line in lines)
    assert lines[-1] == "NOT TensorRT-buildable" and not any(line.startswith("OK:") for line in lines)
    assert lines[0].startswith("m\\x1b[31m.onnx: opset 18, 1 nodes, ops: Relu\\x1b]0;pwned")


def test_uint8_intermediates_follow_onnx_tensorrts_rule_in_one_place():
    from onnx import TensorProto as T, helper as h

    from mlit_edge.devices.uint8_io import uint8_problems

    def quantized(zero_type: int, out: str = "y", **attrs):
        nodes = [h.make_node("QuantizeLinear", ["x", "s", "z"], ["q"], name="quant", **attrs),
                 h.make_node("DequantizeLinear", ["q", "s", "z"], ["y"], name="dq")]
        outputs = [h.make_tensor_value_info(out, zero_type, [1, 4])]
        return graph(nodes if out == "y" else nodes[:1], outputs=outputs,
                     inits=[h.make_tensor("s", T.FLOAT, [], [0.1]), h.make_tensor("z", zero_type, [], [0])], opset=21)

    assert uint8_problems(quantized(T.UINT8)) == ["QuantizeLinear quant makes the intermediate UINT8 tensor 'q': "
                                                  "TensorRT takes UINT8 only as a network input or output"]
    assert uint8_problems(quantized(T.INT8)) == []  # TensorRT's own Q/DQ recipe: int8 zero points
    assert len(uint8_problems(quantized(T.INT8, output_dtype=T.UINT8))) == 1  # opset 21's output_dtype decides
    assert uint8_problems(quantized(T.UINT8, out="q")) == []  # a UINT8 graph output is allowed


def test_a_sidecar_profile_is_known_or_refused_and_the_graph_decides():
    from mlit_edge.artifacts.schema import ArtifactRecord
    from mlit_edge.devices.profiles import PROFILES, contradiction

    def recorded_profile(data: dict):
        from mlit_edge.devices.profiles import recorded_profile

        return recorded_profile(ArtifactRecord.from_json(data))

    assert recorded_profile({}) is None and recorded_profile({"profile": PROFILES["jetpack-6.0"].record()}).name \
        == "jetpack-6.0"
    for value, shown in ((5, "profile 5 "), ("jetpack-5.1", "profile 'jetpack-5.1' "),
                         ({"name": "x" * 500}, "profile 'xxxx"), ({}, "profile None ")):
        with pytest.raises(ValueError, match=shown):
            recorded_profile({"profile": value})
    jp51 = PROFILES["jetpack-5.1"]
    assert "opset 18" in contradiction(jp51, 18, ["Relu"])
    assert "LayerNormalization" in contradiction(jp51, 17, ["LayerNormalization"])
    assert contradiction(jp51, 17, ["ReduceMean"]) is None
    assert contradiction(PROFILES["jetpack-6.0"], 17, ["LayerNormalization"]) is None


def test_build_serialized_says_why_inputs_cannot_be_built_instead_of_raising(tmp_path):
    trt = pytest.importorskip("tensorrt_rtx")
    from onnx import TensorProto as T, helper as h

    from mlit_edge.engine.plan import build_serialized

    dyn = tmp_path / "dyn.onnx"
    dyn.write_bytes(graph([h.make_node("Relu", ["x"], ["y"])], inputs=[h.make_tensor_value_info(
        "x", T.FLOAT, ["N", 3, "H", "W"])], outputs=[h.make_tensor_value_info("y", T.FLOAT, None)]).SerializeToString())
    result = build_serialized(dyn, trt)
    assert not result["ok"] and result["errors"] == [
        "input x has dynamic dimensions besides the batch (its dims: [-1, 3, -1, -1], -1: dynamic): an engine is "
        "built with one batch profile on the first input; export with a fixed size"]
