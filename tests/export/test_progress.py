"""`export` and `build` (issue 50 item 6): the --out folder made as build makes it, with one-line errors for a
file in the way; the long steps' progress on stderr (a bar on a terminal, periodic lines elsewhere), silenced
by --no-progress, with stdout left to the artifact's path."""
import io
import re
import shutil
import time

import pytest

pytest.importorskip("onnxruntime")

from mlit_edge.base import progress as progress_module  # noqa: E402
from mlit_edge.base.progress import INDENT, progress, shown  # noqa: E402
from tests.helpers import run_cli  # noqa: E402

FAST = 0.05  # seconds: base.progress.INTERVAL in these tests, so a tiny model's steps report at all


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def _count(step, n: int, pause: float) -> None:
    for _ in range(n):
        time.sleep(pause)
        step.advance()


def test_off_a_terminal_a_step_writes_periodic_lines_and_how_long_it_took(monkeypatch, capsys):
    monkeypatch.setattr(progress_module, "INTERVAL", FAST)
    with shown(True), progress("calibration pass", 4) as step:
        _count(step, 4, FAST)
    lines = capsys.readouterr().err.splitlines()
    assert re.fullmatch(rf"{INDENT}calibration pass: 4 images in \d+ s", lines[-1]), lines
    assert any(re.fullmatch(rf"{INDENT}calibration pass: [0-3]/4 images, \d+ s", line) for line in lines[:-1]), lines


def test_on_a_terminal_a_step_draws_a_bar_and_clears_it(monkeypatch):
    monkeypatch.setattr(progress_module, "INTERVAL", FAST)
    monkeypatch.setattr(progress_module, "REFRESH", FAST / 2)
    tty = Terminal()
    monkeypatch.setattr("sys.stderr", tty)
    with shown(True), progress("verification: ONNX Runtime", 3) as step:
        _count(step, 3, FAST)
    out = tty.getvalue()
    assert "\r" in out and "0/3" in out and "img" in out  # tqdm's bar, drawn when the step starts
    assert out.endswith(f"{INDENT}verification: ONNX Runtime: 3 images in 0 s\n")


def test_silent_when_off_or_outside_a_run_and_a_failed_step_has_no_closing_line(monkeypatch, capsys):
    monkeypatch.setattr(progress_module, "INTERVAL", FAST)
    with shown(False), progress("fp16 conversion"):
        time.sleep(3 * FAST)
    with progress("torch.onnx.export"):  # no run opened `shown`: a library call reports nothing
        time.sleep(3 * FAST)
    assert capsys.readouterr().err == ""
    with pytest.raises(RuntimeError), shown(True), progress("calibration pass"):
        time.sleep(3 * FAST)
        raise RuntimeError("the step failed")
    err = capsys.readouterr().err
    assert f"{INDENT}calibration pass: " in err and "done in" not in err  # its periodic lines, then the error alone


def test_the_output_folder_is_made_and_a_refused_write_leaves_none_of_it(tmp_path):
    from mlit_edge.artifacts.outputs import output_folder

    with output_folder(tmp_path / "a" / "b" / "c") as folder:
        assert folder.is_dir()
    with pytest.raises(RuntimeError), output_folder(tmp_path / "new" / "deeper"):
        raise RuntimeError("refused before anything was written")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a"]  # new/ went with deeper/
    (tmp_path / "file").write_text("x")
    for inside in ("file", "file/sub"):
        with pytest.raises(OSError, match=r"^cannot write to the output folder .* \(.*file is a file, not a folder\)$"):
            with output_folder(tmp_path / inside):
                pass


@pytest.mark.parametrize("out", ["file/m.onnx", "file/sub/m.onnx"])
def test_export_into_a_file_is_one_line(tmp_path, out):
    (tmp_path / "file").write_text("x")
    proc = run_cli("export", "--size", "xxs", "--random-weights", "--out", out, cwd=tmp_path, check=False)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    last = proc.stderr.strip().splitlines()[-1]
    assert last == f"Error: cannot write to the output folder {out.rsplit('/', 1)[0]} (file is a file, not a folder)"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file"]


def test_export_out_names_a_file_or_a_folder(tmp_path):
    from mlit_edge.artifacts.schema import ArtifactRecord
    from mlit_edge.export.requests import ExportRequest
    from mlit_edge.export.resolve import resolve_plan
    from mlit_edge.export.source import Source

    source = Source(ArtifactRecord.from_json({"model": {"size": "xxs", "config": {"dim": 108, "heads": 6}}}))
    (tmp_path / "made.onnx").mkdir()  # an existing folder is a folder, whatever its name
    for out, fp32 in [("m.onnx", "m.onnx"), ("new/deeper", "new/deeper/mlit-xxs-fp32.onnx"),
                      ("made.onnx", "made.onnx/mlit-xxs-fp32.onnx")]:
        plan = resolve_plan(ExportRequest(out=str(tmp_path / out), precisions=("fp16",)), source)
        assert plan.fp32 == tmp_path / fp32 and plan.variants[0].path.parent == plan.fp32.parent
    with pytest.raises(ValueError, match=r"--out m\.txt: the fp32 export's name must end in \.onnx \(or name a folder\)"):
        ExportRequest(out="m.txt")


@pytest.fixture
def tiny_fp32(tiny_onnx, tmp_path):
    """The tiny export copied, so that a build beside it writes nothing into the shared fixture's folder."""
    for suffix in ("", ".json"):
        shutil.copyfile(f"{tiny_onnx}{suffix}", tmp_path / f"{tiny_onnx.name}{suffix}")
    return tmp_path / tiny_onnx.name


@pytest.mark.parametrize("flag", ["--progress", "--no-progress"])
def test_build_shows_calibration_progress_on_stderr_and_only_the_path_on_stdout(tiny_fp32, monkeypatch, flag):
    monkeypatch.setattr(progress_module, "INTERVAL", FAST)
    out = tiny_fp32.parent / "new" / "deeper"
    proc = run_cli("build", "--onnx", tiny_fp32, "--precision", "int8", "--target", "onnxruntime", "--calib-n", "32",
                   "--no-eval", "--no-calib-cache", "--out", out, flag)
    assert proc.stdout.strip() == str(out / "mlit-tiny-int8-ort.onnx")
    steps = re.findall(rf"^{INDENT}(calibration pass|routing coverage): ", proc.stderr, re.M)
    if flag == "--progress":
        assert "calibration pass" in steps, proc.stderr
    else:
        assert steps == [] and "images in" not in proc.stderr, proc.stderr


@pytest.mark.slow
def test_export_makes_its_missing_nested_folder_and_shows_the_export(tmp_path, monkeypatch):
    """A real export (torch.onnx.export of a tiny checkpoint: seconds) into a folder that does not exist yet."""
    from mlit_edge.train.checkpoint import make_checkpoint, save_atomic
    from tests.helpers import tiny_model

    monkeypatch.setattr(progress_module, "INTERVAL", FAST)
    model = tiny_model()
    meta = {"name": "mnist5k", "classes": [str(i) for i in range(10)], "mean": [0.1307] * 3, "std": [0.3081] * 3}
    save_atomic(make_checkpoint("mlit", model, model.cfg, "xxs", meta), tmp_path / "c.pt")
    proc = run_cli("export", "--checkpoint", tmp_path / "c.pt", "--out", tmp_path / "new" / "deeper")
    folder = tmp_path / "new" / "deeper"
    assert proc.stdout == f"{folder / 'mlit-xxs-custom-fp32.onnx'}\n"  # the paths alone, as build prints its own
    made = sorted(p.name for p in folder.iterdir())
    assert made == ["mlit-xxs-custom-fp32.onnx", "mlit-xxs-custom-fp32.onnx.json"]
    assert re.search(rf"^{INDENT}torch\.onnx\.export: done in \d+ s$", proc.stderr, re.M), proc.stderr
    assert re.search(rf"^{INDENT}top-1 on mnist5k test: 1000 images in \d+ s$", proc.stderr, re.M), proc.stderr
