"""`export-triton` labels: labels.txt beside config.pbtxt and `label_filename` on the logits, so that Triton's
classification extension returns class names; parsed with Triton's own model-config protobuf."""
import json
from pathlib import Path

import pytest

pytest.importorskip("onnx")
pytest.importorskip("tritonclient")
text_format = pytest.importorskip("google.protobuf.text_format")

from mlit_edge.artifacts.sidecar import read_sidecar, write_sidecar  # noqa: E402
from tests.helpers import run_cli, model_config_pb2  # noqa: E402


def _parse(folder: Path):
    pb2 = model_config_pb2()
    return text_format.Parse((folder / "config.pbtxt").read_text(), pb2.ModelConfig())


def _with_classes(tiny_onnx: Path, tmp_path: Path, classes: list) -> Path:
    """A copy of the tiny artifact whose sidecar names `classes` (re-signed: the sidecar stays valid)."""
    art = tmp_path / "mlit-tiny-fp32.onnx"
    art.write_bytes(tiny_onnx.read_bytes())
    record = json.loads(Path(f"{tiny_onnx}.json").read_text())
    write_sidecar(art, {**record, "classes": classes})
    return art


def test_labels_file_is_the_classes_in_order_and_the_logits_name_it(tiny_onnx, tmp_path):
    names = ["zéro", "un", "deux", "trois", "quatre", "cinq", "six", "sept", "huit", "neuf"][:len(
        read_sidecar(tiny_onnx)["classes"])]
    art = _with_classes(tiny_onnx, tmp_path, names)
    folder = Path(run_cli("export-triton", art, "--repo", tmp_path / "repo").stdout.strip())
    cfg = _parse(folder)
    logits = [o for o in cfg.output if o.name == "logits"]
    assert len(logits) == 1 and logits[0].label_filename == "labels.txt"
    assert all(not o.label_filename for o in cfg.output if o.name != "logits")
    assert (folder / "labels.txt").read_text(encoding="utf-8").splitlines() == names


@pytest.mark.parametrize("bad", ["two\nlines", "carriage\rreturn", "sep\u2028arator"])
def test_a_class_name_with_a_line_break_is_refused_and_nothing_is_written(tiny_onnx, tmp_path, bad):
    n = len(read_sidecar(tiny_onnx)["classes"])
    art = _with_classes(tiny_onnx, tmp_path, [bad] + [str(i) for i in range(1, n)])
    proc = run_cli("export-triton", art, "--repo", tmp_path / "repo", check=False)
    assert proc.returncode == 1 and "holds a line break" in proc.stderr and "Traceback" not in proc.stderr
    assert not (tmp_path / "repo").exists() or not any((tmp_path / "repo").iterdir())
