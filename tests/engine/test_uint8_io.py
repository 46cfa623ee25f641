"""TensorRT's UINT8 network-input rule (devices/uint8_io.py): which JetPack's TensorRT takes it, checked against
each release's own Python API data, and which graphs it takes, checked on graphs made here (TensorRT-RTX, the
CI's builder, is laxer than JetPack's TensorRT on one of them)."""
from __future__ import annotations

from dataclasses import replace

import pytest

from mlit_edge.engine import trt_sources
from mlit_edge.devices.uint8_io import uint8_input_allowed, uint8_inputs, uint8_problems
from mlit_edge.devices.profiles import PROFILES


def _graph(nodes, out_type=None, path=None, opset=18):
    import onnx
    from onnx import TensorProto as T
    from onnx import helper as h

    g = h.make_graph(nodes, "g", [h.make_tensor_value_info("pixels", T.UINT8, [1, 3, 8, 8])],
                     [h.make_tensor_value_info("y", out_type or T.FLOAT, [1, 3, 8, 8])])
    model = h.make_model(g, opset_imports=[h.make_opsetid("", opset)])
    model.ir_version = 9
    if path is not None:
        onnx.save(model, str(path))
    return model


def _cast(x, y, to):
    from onnx import helper as h

    return h.make_node("Cast", [x], [y], name=f"cast_{y}", to=to)


def test_the_rule_agrees_with_every_release_branchs_own_api_and_every_jetpack_has_it():
    branches = [b.split("/")[-1] for b in trt_sources.covered_versions()["trt_python_api"]]
    assert "8.5" in branches  # the first release with UINT8, JetPack 5.1's, is in the data
    for version in branches:  # the constant against each branch's DataType enum, as generated from its bindings
        assert uint8_input_allowed(version) == trt_sources.api_names(version).has("DataType", "UINT8"), version
    for name, profile in PROFILES.items():
        assert uint8_input_allowed(profile.tensorrt), name
    assert not uint8_input_allowed("8.4.1") and not uint8_input_allowed("7")  # JetPack 5.0.2's TensorRT: none
    with pytest.raises(ValueError, match="not a TensorRT version"):
        uint8_input_allowed("eight")


def test_the_stale_85_operator_table_is_why_the_rule_reads_the_api():
    """8.5-GA's docs/operators.md lists Cast without UINT8 though its parser imports UINT8 I/O (its changelog,
    its Cast importer); 8.6-GA's and 10.x's tables list it. The rule reads the API, not this cell."""
    assert "UINT8" not in trt_sources.op_table("8.5").dtypes("Cast")
    assert all("UINT8" in trt_sources.op_table(v).dtypes("Cast") for v in ("8.6", "10.0", "10.1"))


def test_a_tensorrt_without_uint8_refuses_the_export_and_the_check(monkeypatch, tmp_path):
    """Were UINT8 input to come only after JetPack 5.1's TensorRT, the export and `check` would refuse a uint8
    input for it, each in one line (the rule is read where it is used, not copied)."""
    from onnx import TensorProto as T

    from mlit_edge.engine.check import static_checks
    from mlit_edge.export.requests import ExportRequest
    from mlit_edge.export.resolve import resolve_plan
    from mlit_edge.export.source import open_source
    from mlit_edge.devices import uint8_io

    monkeypatch.setattr(uint8_io, "UINT8_INPUT_SINCE", (8, 6))
    assert not uint8_input_allowed("8.5") and uint8_input_allowed("8.6")
    req = ExportRequest(size="xxs", random_weights=True, raw_input=True, input_dtype="uint8", jetpack="5.1",
                        out=str(tmp_path / "m.onnx"), evaluate=False)
    with pytest.raises(ValueError, match="takes no UINT8 network input"):
        resolve_plan(req, open_source(req))
    resolve_plan(replace(req, jetpack="6.0"), open_source(req))  # 8.6: taken
    path = tmp_path / "g.onnx"
    _graph([_cast("pixels", "y", T.FLOAT)], path=path, opset=17)  # what both parsers read
    rep = static_checks(path, PROFILES["jetpack-5.1"])
    assert any("has no UINT8 network input" in p for p in rep.problems), rep.problems
    assert not static_checks(path, PROFILES["jetpack-6.0"]).problems


def test_the_graph_rule_takes_a_cast_to_float_or_half_and_refuses_the_rest():
    from onnx import TensorProto as T
    from onnx import helper as h

    assert uint8_problems(_graph([_cast("pixels", "y", T.FLOAT)])) == []
    assert uint8_problems(_graph([_cast("pixels", "a", T.FLOAT16), _cast("a", "y", T.FLOAT)])) == []
    assert uint8_inputs(_graph([_cast("pixels", "y", T.FLOAT)])) == ["pixels"]
    relu = uint8_problems(_graph([h.make_node("Relu", ["pixels"], ["a"], name="r"), _cast("a", "y", T.FLOAT)]))
    assert len(relu) == 1 and "read by Relu" in relu[0]
    to_int = uint8_problems(_graph([_cast("pixels", "a", T.INT32), _cast("a", "y", T.FLOAT)]))
    assert len(to_int) == 1 and "Cast to element type 6" in to_int[0]
    middle = uint8_problems(_graph([_cast("pixels", "a", T.FLOAT), _cast("a", "b", T.UINT8), _cast("b", "y", T.FLOAT)]))
    assert len(middle) == 1 and "intermediate UINT8 tensor 'b'" in middle[0]
    assert uint8_problems(_graph([_cast("pixels", "a", T.FLOAT), _cast("a", "y", T.UINT8)], T.UINT8)) == []  # output


def test_check_fails_a_uint8_to_int32_cast_that_tensorrt_rtx_builds(tmp_path):
    """The rule is JetPack's TensorRT's, so `check` holds it even where the CI's TensorRT-RTX would build."""
    from onnx import TensorProto as T

    from mlit_edge.engine.check import check
    from mlit_edge.devices.trt_env import import_trt

    trt = import_trt()  # what `check` builds with: None where no TensorRT imports, and then it must say so

    def built(rep, layers):
        """The real parse and build ran with the installed TensorRT and succeeded, or, without one, was skipped
        with the line that says so: never silently neither."""
        if trt is None:
            assert rep.build is None and any("no tensorrt / tensorrt_rtx installed" in n for n in rep.notes), rep.notes
            return
        assert rep.build is not None, ("a TensorRT imports here but check did not build", rep.notes)
        assert rep.build["ok"], rep.build
        assert rep.build["module"] == trt.__name__ and rep.build["layers"] == layers, rep.build
        assert [i["dtype"] for i in rep.build["io"]["inputs"]] == ["uint8"], rep.build["io"]

    path = tmp_path / "g.onnx"
    _graph([_cast("pixels", "a", T.INT32), _cast("a", "y", T.FLOAT)], path=path)
    rep = check(path)
    assert not rep.ok and any("Cast to FLOAT or FLOAT16" in p for p in rep.problems), rep.problems
    built(rep, 2)  # TensorRT-RTX parses and builds what JetPack's TensorRT refuses: the FAIL is the rule's
    ok = tmp_path / "ok.onnx"
    _graph([_cast("pixels", "y", T.FLOAT)], path=ok)
    rep = check(ok)
    assert rep.ok and not rep.problems, rep.problems
    built(rep, 1)
