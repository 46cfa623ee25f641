"""The Python API (mlit_edge/api.py): the README's example run as written, and its one-line errors."""
import re
import subprocess
import sys

import pytest

from tests.helpers import ENV, ROOT


def _readme_example() -> str:
    """The code block of the README's "Python API" section, exactly as the README shows it."""
    section = (ROOT / "README.md").read_text().split("## Python API", 1)[1]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


def test_import_stays_light():
    """`import mlit_edge` and naming the API import neither torch nor ONNX; `mlit_edge.bench` stays callable
    once the bench package is imported."""
    code = ("import sys, mlit_edge; mlit_edge.load, mlit_edge.Classifier, mlit_edge.Model\n"
            "import mlit_edge.bench.suite\n"
            "assert callable(mlit_edge.bench), type(mlit_edge.bench)\n"
            "print(sorted(m for m in ('torch', 'onnx', 'onnxruntime') if m in sys.modules))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=ENV)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"


def test_unknown_keywords_and_bad_values_are_one_line_errors(tmp_path):
    import mlit_edge

    m = mlit_edge.Model("pretrained:xxs-mnist5k", source=None)  # refused before the source is used
    with pytest.raises(TypeError, match=r"export: unknown keyword colour; valid: .*jetpack.*precisions") as err:
        m.export(colour="red")
    assert "\n" not in str(err.value)
    with pytest.raises(ValueError, match="--jetpack|JetPack"):
        m.export(precision="fp16", jetpack="9.9")
    with pytest.raises(ValueError, match="is one precision"):
        m.export(precision="fp16,int8")
    with pytest.raises(TypeError, match="bench: unknown keyword speed; valid: .*duration_s"):
        mlit_edge.bench([tmp_path / "x.onnx"], speed=3)


@pytest.mark.slow
def test_the_readme_example_runs_as_written(tmp_path, monkeypatch, capsys):
    """The example as written, in an empty folder (with the digit a.jpg it classifies), then what it made: the
    fp16 ONNX for JetPack 6.2 as `mlit-edge export --precision fp16 --jetpack 6.2` makes it, the CLI's table for it
    and the shipped model, and the prediction. In this process: a fresh interpreter would prove only the imports,
    which test_import_stays_light checks; and bench times each batch for 0.05 s, not the default 2 s, since its
    table is checked here and not its latencies (bench's own tests hold the timing)."""
    from dataclasses import replace

    import mlit_edge.bench.call as call
    from mlit_edge.train.data import load_dataset
    from PIL import Image

    ds = load_dataset("mnist5k", "test", "data")
    Image.fromarray(ds.hwc(slice(0, 1))[0]).save(tmp_path / "a.jpg", quality=95)
    real = call.bench_and_save
    monkeypatch.setattr(call, "bench_and_save", lambda paths, cfg, *a: real(paths, replace(cfg, duration_s=0.05,
                                                                                          warmup_ms=20.0), *a))
    monkeypatch.chdir(tmp_path)
    check = """
from mlit_edge.bench.report import format_bench
assert onnx.path.name == "model-fp16.onnx" and onnx.record.precision == "fp16", onnx
assert onnx.record.profile == "jetpack-6.2" and (onnx.path.parent / "model.onnx").is_file()
assert str(report) == format_bench(report.data)
assert {r["artifact"] for r in report.rows} == {"model-fp16.onnx", "xxs-mnist5k"}
assert all(r["top1"] > 0.97 for r in report.rows)
with mlit_edge.Classifier.load(onnx) as clf: print("prediction", clf.predict(["a.jpg"])[0].name)
print(report)
"""
    scope = {"__name__": "__readme__"}
    exec(compile(_readme_example() + check, "README.md (Python API)", "exec"), scope)
    out = capsys.readouterr().out
    assert f"prediction {ds.classes[int(ds.labels[0])]}" in out
    assert "model-fp16.onnx  onnxruntime  fp16" in out
    assert scope["report"].data["config"]["duration_s"] == 0.05  # only the timing was shortened
    assert all(a["isolated"] for a in scope["report"].data["artifacts"])  # each still in a process of its own



@pytest.mark.slow  # two exports and a build: about 10 s on the 2-core machine
def test_export_and_build_of_a_checkpoint_path(tmp_path):
    """`load` of a checkpoint path; `export(precisions=...)` returns one artifact per precision asked for,
    `build` the artifact `mlit-edge build` makes, both paths that the runtime takes."""
    import os

    import numpy as np

    import mlit_edge
    from mlit_edge.train.checkpoint import make_checkpoint, save_atomic
    from tests.helpers import tiny_model

    model = tiny_model()  # 36 px, 10 classes: the embedded digits' shape, so the export measures on them
    meta = {"name": "mnist5k", "classes": [str(i) for i in range(10)], "mean": [0.1307] * 3, "std": [0.3081] * 3,
            "img_size": 36}
    save_atomic(make_checkpoint("mlit", model, model.cfg, None, meta), tmp_path / "c.pt")
    m = mlit_edge.load(tmp_path / "c.pt")
    (tmp_path / "e").mkdir()
    made = m.export(precisions="fp32,fp16", out=str(tmp_path / "e" / "tiny.onnx"), evaluate=False)
    assert [a.record.precision for a in made] == ["fp32", "fp16"]
    assert [a.path.name for a in made] == ["tiny.onnx", "tiny-fp16.onnx"] and os.fspath(made[1]) == str(made[1].path)
    built = m.build(precision="fp32", target="onnxruntime", out=str(tmp_path / "b"), evaluate=False)
    assert built.path.parent == tmp_path / "b" and built.record.precision == "fp32"
    with mlit_edge.Classifier.load(built) as clf:
        assert len(clf.predict(np.zeros((2, 36, 36, 3), np.uint8))) == 2
