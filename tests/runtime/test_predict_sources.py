"""`predict(source=...)` (runtime/inputs.py): every kind of source reaches the same predictions, wrong ones are
refused in one line before any work, a video is read only as its results are consumed, and `Prediction` round-trips
through JSON. The CLI's `predict` expands folders and globs with the same function. All on the tiny random
model (tests/conftest.py `tiny_onnx`), in-process."""
import json
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("onnxruntime")
Image = pytest.importorskip("PIL.Image")

from mlit_edge.runtime import Classifier, InputError  # noqa: E402
from mlit_edge.runtime.prediction import KEYS, STAGES, Prediction  # noqa: E402

RNG = np.random.default_rng(0)


@pytest.fixture(scope="module")
def clf(tiny_onnx):
    with Classifier.load(tiny_onnx) as c:
        yield c


@pytest.fixture(scope="module")
def images() -> np.ndarray:
    """Five 40x40 RGB images, different enough that the random model's probabilities differ."""
    return RNG.integers(0, 256, (5, 40, 40, 3), dtype=np.uint8)


@pytest.fixture
def folder(tmp_path, images) -> Path:
    """The images as PNGs named in an order that is not their write order, beside a text file and a sub-folder
    holding an image (neither is classified: not an image by suffix; not recursive)."""
    d = tmp_path / "imgs"
    (d / "sub").mkdir(parents=True)
    for i in reversed(range(len(images))):
        Image.fromarray(images[i]).save(d / f"img{i}.png")
    (d / "notes.txt").write_text("not an image")
    Image.fromarray(images[0]).save(d / "sub" / "deeper.png")
    return d


def _probs(preds) -> np.ndarray:
    return np.array([p.probs for p in preds])


def test_every_kind_of_source_gives_the_same_predictions(clf, folder, images):
    from_list = clf.predict(list(images), 3)  # the old call, positional, still works
    assert len(from_list) == 5 and len(from_list[0].top) == 3 and len({p.probs.argmax() for p in from_list}) >= 1
    assert not np.allclose(from_list[0].probs, from_list[1].probs)  # equalities below are not trivially met
    for source in (folder, str(folder), str(folder / "img*.png"), [str(folder / f"img{i}.png") for i in range(5)],
                   images, iter(list(images))):
        got = clf.predict(source=source, top_k=3)
        assert np.allclose(_probs(got), _probs(from_list), atol=1e-6), source
        assert [p.index for p in got] == list(range(5))
    named = clf.predict(source=folder)
    assert [Path(p.path).name for p in named] == [f"img{i}.png" for i in range(5)]  # sorted, no notes.txt, no sub/
    assert all(p.frame is None for p in named) and clf.predict(images)[0].path is None
    one = clf.predict(source=images[0])
    assert len(one) == 1 and np.allclose(one[0].probs, from_list[0].probs, atol=1e-6)


def test_top5_times_and_chunks(clf, images):
    preds = clf.predict(source=images, batch=2)
    assert [p.batch for p in preds] == [2, 2, 2, 2, 1]  # each item carries its chunk's size and times
    for p in preds:
        assert set(p.times_ms) == set(STAGES) and all(t >= 0 for t in p.times_ms.values())
        assert len(p.top5) == 5 and p.top5[0] == p.top[0] == (p.class_id, p.name, p.prob)
        assert [c[2] for c in p.top5] == sorted((c[2] for c in p.top5), reverse=True)
        assert p.top5[4][2] == pytest.approx(np.sort(p.probs)[-5])
    assert preds[0].times_ms is preds[1].times_ms  # one per chunk, read-only, so sharing it is safe
    with pytest.raises(TypeError):
        preds[0].times_ms["inference"] = 0.0


def test_prediction_round_trips_through_json(clf, folder):
    p = clf.predict(source=folder, top_k=2)[1]
    d = json.loads(p.to_json())
    assert list(d) == list(KEYS) and d == p.to_dict()
    assert {"path", "class_id", "name", "prob", "top"} <= set(d)  # what `predict --json` consumers read
    back = Prediction.from_dict(d)
    assert back == p and back.top == p.top and back.top5 == p.top5 and isinstance(back.top5[0], tuple)
    assert back.probs is None and len(back.top5) == 5
    with pytest.raises(ValueError, match="unknown key 'colour'"):
        Prediction.from_dict({**d, "colour": 1})


@pytest.mark.parametrize("source, error, words", [
    (42, TypeError, "source=42 (int) is not a source"),
    (b"x.png", TypeError, "(bytes) is not a source"),
    (None, TypeError, "give source="),
    ({"a": 1}, TypeError, "(dict) is not a source"),
    ([], InputError, "empty batch"),
    ([np.zeros((4, 4, 3), np.uint8), 7], InputError, "images[1]: expected a numpy array or a file path, got int"),
    ("rtsp://192.0.2.1/cam", InputError, "never ends; use predict(source=..., stream=True)"),
])
def test_wrong_sources_are_one_line_errors(clf, source, error, words):
    with pytest.raises(error) as got:
        clf.predict(source=source)
    assert words in str(got.value) and "\n" not in str(got.value)


def test_empty_folder_missing_file_and_unmatched_glob_are_refused_before_any_result(clf, tmp_path):
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "notes.txt").write_text("no image here")
    for source, words in [(tmp_path / "empty", "holds no images"), (str(tmp_path / "*.jpg"), "no image file matches"),
                          (tmp_path / "gone.png", "does not exist"), (str(tmp_path / "gone.mp4"), "does not exist")]:
        with pytest.raises(InputError, match=words):  # the generator form too: refused by the call, not later
            clf.predict(source=source, stream=True)


def _video(path: Path, frames: np.ndarray) -> Path:
    cv2 = pytest.importorskip("cv2")
    writer = cv2.VideoWriter(str(path), cv2.VideoWriter_fourcc(*"MJPG"), 10, frames.shape[1:3][::-1])
    for f in frames:
        writer.write(cv2.cvtColor(f, cv2.COLOR_RGB2BGR))
    writer.release()
    return path


def test_a_video_is_read_only_as_its_results_are_consumed(clf, tmp_path, monkeypatch):
    from mlit_edge.runtime import video

    video_file = _video(tmp_path / "clip.avi", RNG.integers(0, 256, (9, 48, 64, 3), dtype=np.uint8))
    pulled, closed = [], []
    iterate, close = video.FrameReader.__iter__, video.FrameReader.close

    def counting(self):
        for frame in iterate(self):
            pulled.append(frame.index)
            yield frame

    monkeypatch.setattr(video.FrameReader, "__iter__", counting)
    monkeypatch.setattr(video.FrameReader, "close", lambda self: (closed.append(1), close(self)))
    gen = clf.predict(source=str(video_file), stream=True, batch=3)
    assert pulled == []  # nothing is read until the first result is asked for
    first = next(gen)
    assert pulled == [0, 1, 2] and (first.frame, first.index, first.path, first.batch) == (0, 0, str(video_file), 3)
    gen.close()  # the caller stops early: the reader is released, nothing more is read
    assert closed and pulled == [0, 1, 2]

    pulled.clear()
    preds = clf.predict(source=video_file, batch=4)  # a Path to a video too; the whole file
    assert [p.frame for p in preds] == list(range(9)) and [p.batch for p in preds] == [4] * 8 + [1]
    cv2 = pytest.importorskip("cv2")
    cap, decoded = cv2.VideoCapture(str(video_file)), []
    while True:
        ok, bgr = cap.read()
        if not ok:
            break
        decoded.append(cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB))
    cap.release()
    assert np.allclose(_probs(preds), _probs(clf.predict(np.stack(decoded))), atol=1e-6)  # the same preprocessing


class LiveCapture:
    """A camera that makes frames faster than they are taken (its frames' grey level is their count)."""

    def __init__(self) -> None:
        self.n = 0

    def read(self):
        import time

        time.sleep(0.002)
        self.n += 1
        return True, np.full((24, 32, 3), self.n % 256, np.uint8)

    def get(self, prop):
        return 0.0

    def release(self):
        pass


def test_a_stream_uri_gives_its_newest_frames_one_at_a_time_until_the_caller_stops(clf, monkeypatch):
    pytest.importorskip("cv2")
    from mlit_edge.runtime import video

    readers = []
    open_reader = video.FrameReader.open
    monkeypatch.setattr(video.FrameReader, "_capture", lambda self: LiveCapture())
    monkeypatch.setattr(video.FrameReader, "open", lambda self: (readers.append(self), open_reader(self))[1])
    gen = clf.predict(source="rtsp://192.0.2.1/cam", stream=True, batch=8)
    got = [next(gen) for _ in range(3)]
    assert [p.batch for p in got] == [1, 1, 1] and all(p.path == "rtsp://192.0.2.1/cam" for p in got)
    assert got[0].frame < got[1].frame < got[2].frame and [p.index for p in got] == [0, 1, 2]
    gen.close()
    assert readers[0]._stop.is_set() and not readers[0]._thread.is_alive()  # the grabbing thread is ended


def test_cli_predict_takes_folders_and_globs(tiny_onnx, folder, tmp_path):
    from click.testing import CliRunner

    from mlit_edge.cli import main

    (tmp_path / "none").mkdir()
    args = ["predict", str(folder), str(folder / "img[34].png"), str(tmp_path / "none"), str(tmp_path / "*.gif"),
            "--model", str(tiny_onnx), "--json", "--top-k", "2"]
    r = CliRunner().invoke(main, args)
    assert r.exit_code == 2, r.output  # two entries could not be classified; the rest were
    out = json.loads(r.stdout)
    assert [Path(o["path"]).name for o in out] == [f"img{i}.png" for i in (0, 1, 2, 3, 4, 3, 4)] + ["none", "*.gif"]
    assert all(list(o) == list(KEYS) and len(o["top"]) == 2 for o in out[:7])
    assert "holds no images" in out[7]["error"] and "no image file matches" in out[8]["error"]
    with Classifier.load(tiny_onnx) as c:
        want = c.predict(source=folder, top_k=2)
    assert [o["prob"] for o in out[:5]] == pytest.approx([p.prob for p in want], abs=1e-6)
