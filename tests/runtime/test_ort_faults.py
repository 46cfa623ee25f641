"""ONNX Runtime failing under the runtime: not installed, a graph that fails only when it runs (asks for
171 GB), a sidecar's session option of the wrong type. Each is one line of ours, an InputError in the API."""
import sys

import numpy as np
import pytest
from click.testing import CliRunner

pytest.importorskip("onnxruntime")

from mlit_edge.cli import main  # noqa: E402
from mlit_edge.runtime import Classifier, InputError  # noqa: E402
from tests.hostile_corpus import alloc_at_run_onnx  # noqa: E402


def test_predict_without_onnxruntime_is_one_line(tmp_path, monkeypatch):
    (tmp_path / "m.onnx").write_bytes(b"not read: ONNX Runtime is missing before anything is")
    (tmp_path / "d.png").write_bytes(b"")
    monkeypatch.setitem(sys.modules, "onnxruntime", None)  # `import onnxruntime` raises ImportError
    r = CliRunner().invoke(main, ["predict", str(tmp_path / "d.png"), "--model", str(tmp_path / "m.onnx")])
    assert r.exit_code == 1 and isinstance(r.exception, SystemExit), r.output
    assert "needs ONNX Runtime, which is not installed here" in r.stderr and "Traceback" not in r.output


def test_a_graph_that_fails_when_it_runs_is_an_input_error(tmp_path):
    with Classifier.load(alloc_at_run_onnx(tmp_path)) as clf:
        with pytest.raises(InputError, match="ONNX Runtime cannot run alloc_at_run.onnx: .*FAIL"):
            clf.predict([np.zeros((36, 36, 3), np.uint8)])


def test_an_onnxruntime_build_this_machine_would_refuse_is_refused_first(tmp_path, monkeypatch):
    import onnxruntime

    from mlit_edge.export.onnx_export import export_onnx
    from tests.helpers import tiny_model

    monkeypatch.setattr(onnxruntime, "__version__", "1.20.0")
    with pytest.raises(ValueError, match=r"x.onnx needs ONNX Runtime 1.23 or newer .*; this is 1.20.0"):
        export_onnx(tiny_model(), tmp_path / "x.onnx", {}, attention="onnx")
    assert list(tmp_path.iterdir()) == []
