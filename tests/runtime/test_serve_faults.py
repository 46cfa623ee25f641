"""`serve` under an operator's bad day, as real processes: kill -9 at any moment, two servers on one inbox,
a rotated results file, a `done/` that cannot be written, a torn results line, the results inside the
inbox, a full disk, wide images and a long backlog. Each image must get exactly one row."""
import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("onnxruntime")
Image = pytest.importorskip("PIL.Image")

from tests.helpers import CLI, ENV, ROOT  # noqa: E402


@pytest.fixture(scope="module")
def model(trained_onnx) -> Path:
    return trained_onnx


def drop(inbox: Path, names, value: int = 200) -> None:
    """Images dropped the documented safe way: written under a dot name, renamed into place."""
    for name in names:
        Image.fromarray(np.full((28, 28), value, np.uint8)).save(inbox / f".{name}", format="PNG")
        os.replace(inbox / f".{name}", inbox / name)


def start(model: Path, inbox: Path, results: Path, env: dict | None = None) -> subprocess.Popen:
    return subprocess.Popen([*CLI, "serve", "--model", str(model), "--inbox", str(inbox), "--results", str(results),
                             "--interval", "0.05", "--settle", "0"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env or ENV)


def rows(*files: Path) -> list[dict]:
    """Every row of the results files; a line that does not parse fails the test."""
    out = []
    for f in files:
        if f.exists():
            out += [json.loads(line) for line in f.read_text().splitlines()]
    return out


def wait_for(condition, timeout: float = 120.0) -> None:
    end = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < end, "timed out"
        time.sleep(0.1)


def stop(proc: subprocess.Popen) -> str:
    proc.send_signal(signal.SIGTERM)
    try:
        return proc.communicate(timeout=60)[1]
    except subprocess.TimeoutExpired:
        proc.kill()
        return proc.communicate()[1]


def exactly_once(results: list[dict], names: list[str]) -> None:
    assert sorted(r["path"] for r in results) == sorted(names), "a file with no row or two rows"
    assert len({r["id"] for r in results}) == len(results)


@pytest.mark.slow
def test_kill_9_at_random_moments_and_between_the_row_and_the_move(model, tmp_path):
    inbox, results = tmp_path / "inbox", tmp_path / "results.jsonl"
    inbox.mkdir()
    names = [f"img{i:03d}.png" for i in range(40)]
    drop(inbox, names)
    rng = random.Random(0)
    for _ in range(40):  # killed at random moments until every file is out of the inbox
        proc = start(model, inbox, results)
        time.sleep(rng.uniform(1.0, 3.0))
        proc.kill()
        proc.wait()
        if not [p for p in inbox.iterdir() if p.is_file() and not p.name.startswith(".")]:
            break
    # a kill exactly between a recorded row and its move to done/ (the window kill -9 used to duplicate)
    drop(inbox, ["last.png"])
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(
        "import os, signal\n_rename = os.rename\n"
        "def rename(src, dst, *a, **k):\n"
        "    if '/done/' in str(dst):\n        os.kill(os.getpid(), signal.SIGKILL)\n"
        "    return _rename(src, dst, *a, **k)\nos.rename = rename\n")
    proc = start(model, inbox, results, {**ENV, "PYTHONPATH": f"{hook}{os.pathsep}{ROOT}"})
    assert proc.wait(timeout=120) == -signal.SIGKILL
    assert list((inbox / "processing").iterdir()), "the kill did not land between the row and the move"
    proc = start(model, inbox, results)
    wait_for(lambda: len(list((inbox / "done").iterdir())) == 41)
    stop(proc)
    exactly_once(rows(results), [*names, "last.png"])
    assert not list((inbox / "processing").iterdir())


@pytest.mark.slow
def test_a_second_server_on_one_inbox_is_refused(model, tmp_path):
    inbox, results = tmp_path / "inbox", tmp_path / "results.jsonl"
    inbox.mkdir()
    first = start(model, inbox, results)
    wait_for(lambda: (inbox / "done").is_dir())
    second = subprocess.run([*CLI, "serve", "--model", str(model), "--inbox", str(inbox), "--results",
                             str(tmp_path / "other.jsonl")], capture_output=True, text=True, env=ENV, timeout=120)
    assert second.returncode == 1 and f"(pid {first.pid}) is serving" in second.stderr
    assert len(second.stderr.strip().splitlines()) == 2  # the start line, then the one error line
    names = [f"{i}.png" for i in range(20)]
    drop(inbox, names)
    wait_for(lambda: len(rows(results)) == 20)
    stop(first)
    exactly_once(rows(results), names)


@pytest.mark.slow
def test_a_rotated_results_file_loses_no_rows(model, tmp_path):
    inbox, results = tmp_path / "inbox", tmp_path / "results.jsonl"
    inbox.mkdir()
    proc = start(model, inbox, results)
    drop(inbox, ["a.png", "b.png", "c.png"])
    wait_for(lambda: len(rows(results)) == 3)
    os.rename(results, tmp_path / "results.jsonl.1")  # what logrotate does
    drop(inbox, ["d.png", "e.png", "f.png"])
    wait_for(lambda: len(rows(results)) == 3)
    results.unlink()  # deleted outright
    drop(inbox, ["g.png"])
    wait_for(lambda: len(rows(results)) == 1)
    err = stop(proc)
    assert sorted(r["path"] for r in rows(tmp_path / "results.jsonl.1")) == ["a.png", "b.png", "c.png"]
    assert [r["path"] for r in rows(results)] == ["g.png"]  # d, e, f: in the new file, which the test deleted
    assert "rotated or removed" in err


@pytest.mark.slow
def test_an_image_that_cannot_be_moved_is_recorded_once_and_left_alone(model, tmp_path):
    inbox, results = tmp_path / "inbox", tmp_path / "results.jsonl"
    inbox.mkdir()
    if os.geteuid() != 0:
        (inbox / "done").mkdir()
        (inbox / "done").chmod(0o555)
    else:  # root writes anywhere: a done/ on another file system makes the move fail (EXDEV) all the same
        shm = Path("/dev/shm")
        if not shm.is_dir() or os.stat(shm).st_dev == os.stat(tmp_path).st_dev:
            pytest.skip("needs /dev/shm on another file system to make done/ unmovable for root")
        elsewhere = shm / f"mlit-edge-test-{os.getpid()}-{tmp_path.name}"
        elsewhere.mkdir()
        (inbox / "done").symlink_to(elsewhere, target_is_directory=True)
    try:
        drop(inbox, ["a.png", "b.png"])
        proc = start(model, inbox, results)
        wait_for(lambda: len(rows(results)) == 2)
        time.sleep(1.5)  # 30 more polls: no second row
        err = stop(proc)
        proc = start(model, inbox, results)  # and a restart does not classify them again
        time.sleep(3)
        err += stop(proc)
        exactly_once(rows(results), ["a.png", "b.png"])
        assert len(list((inbox / "processing").iterdir())) == 2
        assert err.count("cannot be moved to done/") == 4  # once each, in each of the two runs
    finally:
        if os.geteuid() == 0:
            import shutil

            shutil.rmtree(elsewhere, ignore_errors=True)


@pytest.mark.slow
def test_a_torn_results_line_is_cut_and_the_results_inside_the_inbox_refused(model, tmp_path):
    inbox, results = tmp_path / "inbox", tmp_path / "results.jsonl"
    inbox.mkdir()
    results.write_text('{"path": "old.png", "class_id": 1}\n{"path": "torn.png", "cla')
    drop(inbox, ["new.png"])
    proc = start(model, inbox, results)
    wait_for(lambda: results.read_text().endswith("\n") and len(results.read_text().splitlines()) == 2)
    err = stop(proc)
    assert [r["path"] for r in rows(results)] == ["old.png", "new.png"] and "cut a torn last line" in err
    inside = subprocess.run([*CLI, "serve", "--model", str(model), "--inbox", str(inbox), "--results",
                             str(inbox / "results.jsonl")], capture_output=True, text=True, env=ENV, timeout=120)
    assert inside.returncode == 1 and "is inside the inbox" in inside.stderr and "Traceback" not in inside.stderr


def test_a_failed_write_leaves_no_partial_line(tmp_path, monkeypatch):
    """A full disk mid-line: the part written is rolled back, so the file never holds a corrupt line."""
    from mlit_edge.runtime import inbox as ib

    log = ib.ResultsLog(tmp_path / "r.jsonl")
    log.write({"path": "a.png"})
    real_write = os.write

    def full_disk(fd, data):
        real_write(fd, data[: len(data) // 2])
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(ib.os, "write", full_disk)
    with pytest.raises(OSError, match="No space left"):
        log.write({"path": "b.png"})
    monkeypatch.setattr(ib.os, "write", real_write)
    log.write({"path": "c.png"})
    log.close()
    assert [r["path"] for r in rows(tmp_path / "r.jsonl")] == ["a.png", "c.png"]


class FullDisk:
    """A stderr on a full disk (as /dev/full is): every write fails with ENOSPC."""

    def write(self, text):
        raise OSError(28, "No space left on device")

    def flush(self):
        raise OSError(28, "No space left on device")


def test_serve_keeps_serving_and_its_rows_when_its_log_disk_is_full(tiny_onnx, tmp_path, monkeypatch):
    """Its log lines (a torn results line cut, a file named done/ moved aside) are dropped, not fatal."""
    from mlit_edge.runtime import watch

    inbox, results = tmp_path / "inbox", tmp_path / "r.jsonl"
    inbox.mkdir()
    (inbox / "done").write_text("a file where the folder goes")
    results.write_text('{"path": "before.png"}\n{"path": "to')
    drop(inbox, ["a.png"])
    monkeypatch.setattr(sys, "stderr", FullDisk())
    assert watch(tiny_onnx, inbox, results, interval_s=0.01, max_files=1, settle_s=0) == 1
    monkeypatch.undo()
    assert [r["path"] for r in rows(results)] == ["before.png", "a.png"] and (inbox / "done").is_dir()


def test_serve_refuses_results_that_are_a_fifo(tiny_onnx, tmp_path):
    from mlit_edge.runtime import watch

    os.mkfifo(tmp_path / "r.fifo")
    with pytest.raises(ValueError, match="r.fifo is not a regular file"):
        watch(tiny_onnx, tmp_path / "inbox", tmp_path / "r.fifo", max_files=1)


MEMORY = """
import json, sys
from pathlib import Path
import numpy as np
from PIL import Image
from mlit_edge.bench.host import rss_mb
from mlit_edge.runtime import watch

model, folder = Path(sys.argv[1]), Path(sys.argv[2])
inbox = folder / "inbox"
inbox.mkdir()
Image.fromarray(np.full((28, 28), 9, np.uint8)).save(inbox / "small.png")
watch(model, inbox, folder / "r.jsonl", interval_s=0.01, max_files=1, settle_s=0)
base = rss_mb()
for i in range(6):
    Image.fromarray(np.full((1, 1_000_000 + 1000 * i), 200, np.uint8)).save(inbox / f"wide{i}.png")
watch(model, inbox, folder / "r.jsonl", interval_s=0.01, max_files=6, settle_s=0)
print(json.dumps({"base": base, "after": rss_mb()}))
"""


@pytest.mark.slow
def test_wide_images_leave_the_memory_where_it_was(model, tmp_path):
    """Six 1 x 1,000,000 px PNGs of distinct widths (each used to keep a 36 x W float64 matrix)."""
    proc = subprocess.run([sys.executable, "-c", MEMORY, str(model), str(tmp_path)], capture_output=True, text=True,
                          env=ENV, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    mb = json.loads(proc.stdout.splitlines()[-1])
    assert mb["after"] - mb["base"] < 50, mb
    assert len(rows(tmp_path / "r.jsonl")) == 7


def test_a_backlog_of_10000_files_is_polled_in_one_scan(tmp_path, monkeypatch):
    """The poll does one directory scan and one stat a file (it was quadratic in the backlog: 17.65 s a poll
    at 10,000 files); the figure is in benchmarks/serve_poll.py, not here."""
    from mlit_edge.runtime import serve

    inbox = tmp_path / "inbox"
    inbox.mkdir()
    for i in range(10_000):
        (inbox / f"{i:05d}.png").write_bytes(b"")
    files = serve._candidates(inbox)
    assert len(files) == 10_000 and files[0][0].name == "00000.png" and files[0][1][0] == 0


class HeightClassifier:
    """A stand-in model whose class is the image's height, so a row names the image it was made from;
    `hook` runs after each prediction (the moment the file has been read)."""

    max_pixels = None

    def __init__(self, hook) -> None:
        self.hook = hook

    def __enter__(self) -> "HeightClassifier":
        return self

    def __exit__(self, *exc) -> None:
        pass

    def predict(self, images, top_k: int = 1):
        from mlit_edge.runtime.classifier import Prediction
        from mlit_edge.runtime.images import load_image

        arrays = [load_image(x, keep_grey=True) if isinstance(x, (str, Path)) else x for x in images]
        self.hook()
        return [Prediction(a.shape[0], str(a.shape[0]), 1.0, []) for a in arrays]


@pytest.mark.parametrize("moment", ["after the read", "before the claim"])
def test_a_file_renamed_onto_a_name_being_read_gets_its_own_row(tmp_path, monkeypatch, moment):
    """A big a.png is being read when a small digit is renamed onto a.png (the documented way to drop a file):
    each row's class and sha256 must be those of the file moved to done/ under it (the row used to carry the
    big image's class, and done/a.png was the small digit, never classified)."""
    import hashlib

    from mlit_edge.runtime import serve

    inbox, results = tmp_path / "inbox", tmp_path / "results.jsonl"
    inbox.mkdir()
    Image.fromarray(np.full((300, 300), 90, np.uint8)).save(inbox / "a.png")
    Image.fromarray(np.full((28, 28), 200, np.uint8)).save(tmp_path / "small.png")
    swapped = []

    def swap() -> None:  # at most once: the small digit renamed onto the name being served
        if not swapped:
            swapped.append(True)
            os.rename(tmp_path / "small.png", inbox / "a.png")

    hook = swap if moment == "after the read" else lambda: None
    monkeypatch.setattr(serve, "Classifier", type("Fake", (), {"load": staticmethod(
        lambda *a, **k: HeightClassifier(hook))}))
    if moment == "before the claim":  # between the poll's stat of a.png and its rename into processing/
        real_claim = serve.claim
        monkeypatch.setattr(serve, "claim", lambda inbox, f: (swap(), real_claim(inbox, f))[1])
    while serve._candidates(inbox):
        serve.watch("model.onnx", inbox, results, interval_s=0.01, max_files=1, settle_s=0)
    got = rows(results)
    done = [inbox / "done" / name for name in ("a.png", "a-1.png")][:len(got)]
    assert swapped and all(p.exists() for p in done)
    assert [r["class_id"] for r in got] == [Image.open(p).height for p in done], "a row names another file"
    assert [r["sha256"] for r in got] == [hashlib.sha256(p.read_bytes()).hexdigest() for p in done]
    assert [r["bytes"] for r in got] == [p.stat().st_size for p in done]


def test_a_claim_given_back_never_replaces_a_file_dropped_under_its_name(tmp_path):
    """A file that may still be being written goes back to the inbox; one renamed onto its name meanwhile stays,
    and a kill between give_back's link and unlink leaves one file, not two names for it."""
    from mlit_edge.runtime import inbox as ib

    inbox = tmp_path / "inbox"
    inbox.mkdir()
    ib.make_folders(inbox)
    (inbox / "a.png").write_bytes(b"first")
    _, claimed = ib.claim(inbox, inbox / "a.png")
    (inbox / "a.png").write_bytes(b"second")
    assert ib.give_back(inbox, claimed, "a.png") == inbox / "a-1.png"
    assert (inbox / "a.png").read_bytes() == b"second" and (inbox / "a-1.png").read_bytes() == b"first"
    _, claimed = ib.claim(inbox, inbox / "a-1.png")
    os.link(claimed, inbox / "a-1.png")  # as if killed between the link and the unlink
    assert ib.give_back(inbox, claimed, "a-1.png") == inbox / "a-1.png"
    assert not list((inbox / "processing").iterdir()) and sorted(p.name for p in inbox.glob("*.png")) == [
        "a-1.png", "a.png"]
