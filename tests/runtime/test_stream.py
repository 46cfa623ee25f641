"""`mlit-edge stream`: real videos written by OpenCV's VideoWriter (MJPG in AVI, and mp4v in MP4 where the
wheel's FFmpeg has it), the live path's newest-frame rule and reconnects, and the source names a Jetson
user types."""
import functools
import http.server
import json
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import numpy as np
import pytest

cv2 = pytest.importorskip("cv2")
pytest.importorskip("onnx")

from mlit_edge.runtime import Classifier  # noqa: E402
from mlit_edge.runtime.video import FrameReader, SourceError, VideoSource, csi_pipeline, parse_source  # noqa: E402
from tests.helpers import CLI, ENV, NO_TORCH, cli, run_cli  # noqa: E402


def write_video(path: Path, frames: int, fourcc: str = "MJPG", fps: float = 10.0, side: int = 72) -> Path:
    """`frames` digits of the embedded test split, one per frame, scaled to side x side."""
    from mlit_edge.train.data import mnist5k_raw

    digits = mnist5k_raw("test")[0]
    writer = cv2.VideoWriter(str(path), cv2.VideoWriter_fourcc(*fourcc), fps, (side, side))
    assert writer.isOpened()
    for i in range(frames):
        gray = cv2.resize(digits[(i * 37) % len(digits)], (side, side), interpolation=cv2.INTER_NEAREST)
        writer.write(cv2.cvtColor(gray, cv2.COLOR_GRAY2BGR))
    writer.release()
    return path


def decoded(path: Path) -> list[np.ndarray]:
    cap, out = cv2.VideoCapture(str(path)), []
    while True:
        ok, bgr = cap.read()
        if not ok:
            return out
        out.append(cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB))


def rows(text: str) -> list[dict]:
    return [json.loads(line) for line in text.splitlines() if line.strip()]


@pytest.fixture(scope="module")
def model(tiny_onnx) -> Path:
    return tiny_onnx


@pytest.fixture(scope="module")
def clip(tmp_path_factory) -> Path:
    return write_video(tmp_path_factory.mktemp("clip") / "digits.avi", 30)


def test_every_frame_is_classified_as_the_extracted_frames_are(model, clip, tmp_path):
    proc = run_cli("stream", clip, tmp_path / "annotated.avi", "--model", model)
    got = rows(proc.stdout)
    assert [r["frame"] for r in got] == list(range(30))
    assert [r["t"] for r in got[:3]] == pytest.approx([0.0, 0.1, 0.2])
    with Classifier.load(model) as clf:
        one_by_one = [clf.predict(frame)[0] for frame in decoded(clip)]
    assert [r["class_id"] for r in got] == [p.class_id for p in one_by_one]
    assert [r["prob"] for r in got] == pytest.approx([p.prob for p in one_by_one], abs=1e-5)
    assert all(r["latency_ms"] > 0 for r in got) and "classified 30" in proc.stderr and "corrupt 0" in proc.stderr
    annotated = decoded(tmp_path / "annotated.avi")  # readable back, every frame, with the label drawn on
    assert len(annotated) == 30 and annotated[0].shape == (72, 72, 3)


def test_every_n_and_a_static_batch(model, clip, tmp_path):
    got = rows(run_cli("stream", clip, "--model", model, "--every", "4", "--batch", "3").stdout)
    assert [r["frame"] for r in got] == list(range(0, 30, 4))
    single = {r["frame"]: r["class_id"] for r in rows(run_cli("stream", clip, "--model", model).stdout)}
    assert all(single[r["frame"]] == r["class_id"] for r in got)  # batching changes nothing


def test_mp4_where_the_wheel_can_write_it(model, tmp_path):
    probe = cv2.VideoWriter(str(tmp_path / "p.mp4"), cv2.VideoWriter_fourcc(*"mp4v"), 10, (72, 72))
    if not probe.isOpened():
        pytest.skip("this OpenCV wheel writes no mp4v")
    probe.release()
    clip = write_video(tmp_path / "digits.mp4", 12, "mp4v")
    got = rows(run_cli("stream", clip, tmp_path / "out.mp4", "--model", model).stdout)
    assert len(got) == 12 and len(decoded(tmp_path / "out.mp4")) == 12


def test_a_truncated_file_ends_cleanly_and_a_corrupt_frame_is_skipped(model, clip, tmp_path):
    data = clip.read_bytes()
    (tmp_path / "cut.avi").write_bytes(data[: len(data) * 6 // 10])
    proc = run_cli("stream", tmp_path / "cut.avi", "--model", model)
    n = len([r for r in rows(proc.stdout) if "class" in r])  # the frames cut off are each an error record
    assert 5 < n < 30 and "truncated" in proc.stderr and "Traceback" not in proc.stderr
    assert [r["frame"] for r in rows(proc.stdout) if "error" in r] == list(range(n, 30))
    starts = [i for i in range(len(data) - 2) if data[i:i + 3] == b"\xff\xd8\xff"]  # each frame's JPEG
    bad = bytearray(data)
    bad[starts[10] + 2:starts[11] - 8] = bytes(starts[11] - 8 - starts[10] - 2)
    (tmp_path / "bad.avi").write_bytes(bytes(bad))
    proc = run_cli("stream", tmp_path / "bad.avi", "--model", model)
    got = [r for r in rows(proc.stdout) if "class" in r]
    assert len(got) == 29 and 10 not in [r["frame"] for r in got] and "corrupt 1 (frame 10)" in proc.stderr


def test_sigint_mid_stream_leaves_whole_lines_and_a_playable_video(model, tmp_path):
    long_clip = write_video(tmp_path / "long.avi", 3000, fps=30)
    out = tmp_path / "annotated.avi"
    proc = subprocess.Popen([*CLI, "stream", str(long_clip), str(out), "--model", str(model), "--results",
                             str(tmp_path / "r.jsonl")], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=ENV)
    deadline = time.time() + 120
    while time.time() < deadline and (not (tmp_path / "r.jsonl").exists()
                                      or (tmp_path / "r.jsonl").stat().st_size < 2000):
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err[-1500:]
    got = rows((tmp_path / "r.jsonl").read_text())  # every line whole JSON
    assert 20 < len(got) < 3000 and [r["frame"] for r in got] == list(range(len(got)))
    assert len(decoded(out)) >= len(got)  # the writer was finalised: the file plays


def test_bad_sources_are_one_line(model, tmp_path):
    """In a process of its own: OpenCV and FFmpeg write their own warnings to the process's stderr, which
    the command silences; in this process they would go past the one line checked."""
    (tmp_path / "notes.txt").write_text("x")
    (tmp_path / "fake.mp4").write_bytes(b"\x00" * 4096)
    for source, words in [(tmp_path / "missing.mp4", "does not exist"), (tmp_path / "notes.txt", "not a video file"),
                          (tmp_path / "fake.mp4", "cannot open the video"), ("/dev/video97", "cannot open the camera"),
                          ("csi://x", "csi://N")]:
        proc = cli("stream", source, "--model", model, check=False)
        assert proc.returncode != 0 and words in proc.stderr, (source, proc.stderr)
        assert len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr


def test_source_names_map_to_what_opencv_opens():
    csi = parse_source("csi://1", 1920, 1080, 60)
    assert csi.kind == "csi" and csi.live and csi.api == "gstreamer" and csi.target == csi_pipeline(1, 1920, 1080, 60)
    assert "nvarguscamerasrc sensor-id=1" in csi.target and "width=(int)1920" in csi.target
    assert csi.target.endswith("appsink drop=true max-buffers=1")
    for name in ("/dev/video0", "v4l2:///dev/video0"):
        assert parse_source(name) == VideoSource(name, "v4l2", "/dev/video0", "v4l2", True)
    for url in ("rtsp://cam.local:554/stream", "http://127.0.0.1:8080/video.mjpg"):
        assert parse_source(url) == VideoSource(url, "stream", url, "any", True)
    pipe = "videotestsrc ! videoconvert ! appsink"
    assert parse_source(pipe) == VideoSource(pipe, "gstreamer", pipe, "gstreamer", True)
    assert not parse_source("gst://filesrc location=a.mp4 ! decodebin ! videoconvert ! appsink").live
    with pytest.raises(SourceError, match="v4l2:///dev/videoN"):
        parse_source("v4l2://camera")


class FakeCapture:
    """A live camera that makes frames faster than they are taken, then fails `fail_after` reads in."""

    def __init__(self, fail_after: int | None = None) -> None:
        self.n, self.fail_after = 0, fail_after

    def read(self):
        time.sleep(0.002)
        self.n += 1
        if self.fail_after is not None and self.n > self.fail_after:
            return False, None
        return True, np.full((8, 8, 3), self.n % 256, np.uint8)

    def get(self, prop):
        return 0.0

    def release(self):
        pass


def test_live_source_hands_on_the_newest_frame_counts_drops_and_reconnects(monkeypatch):
    import mlit_edge.runtime.video as video

    monkeypatch.setattr(video, "BACKOFF_S", (0.01, 0.02))
    caps = iter([FakeCapture(fail_after=40), None, FakeCapture()])  # a stall, a failed reopen, then back
    monkeypatch.setattr(FrameReader, "_capture", lambda self: next(caps))
    source = VideoSource("rtsp://cam", "stream", "rtsp://cam", "any", True)
    with FrameReader(source) as reader:
        seen, deadline = [], time.time() + 60
        for frame in reader:
            seen.append(frame.index)
            time.sleep(0.02)  # a slow classifier: several frames arrive while it works
            if (reader.reconnects == 2 and len(seen) >= 8) or time.time() > deadline:
                break
    assert seen == sorted(seen) and seen[-1] - seen[0] > len(seen)  # skipped ahead to the newest
    assert reader.dropped > 0 and reader.reconnects == 2 and reader.read >= reader.dropped + len(seen)


def test_an_http_stream_on_localhost_is_read_as_a_live_source(model, clip, tmp_path):
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(clip.parent))
    handler.log_message = lambda *a: None
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/{clip.name}"
        proc = cli("stream", url, "--model", model, "--max-frames", "3", timeout=120, check=False)
    finally:
        server.shutdown()
    if proc.returncode != 0 and "cannot open the stream" in proc.stderr:
        pytest.skip("this OpenCV wheel's FFmpeg reads no HTTP")
    assert proc.returncode == 0, proc.stderr[-1500:]
    assert len(rows(proc.stdout)) == 3 and "live" in proc.stderr and "dropped" in proc.stderr


def test_stream_never_imports_torch(model, clip, tmp_path):
    script = NO_TORCH + textwrap.dedent(f"""
        from mlit_edge.cli import main
        try:
            main(["stream", {str(clip)!r}, {str(tmp_path / 'a.avi')!r}, "--model", {str(model)!r}, "--max-frames", "4"])
        except SystemExit as e:
            assert e.code in (0, None), e.code
        assert not any(m == "torch" or m.startswith("torch.") for m in sys.modules)
        print("OK")
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=ENV)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.count('"frame"') == 4 and "OK" in proc.stdout


def snapshot(folder: Path) -> dict[str, bytes]:
    """Every file under `folder` (links as what they point to), to see that a refused run changed nothing."""
    return {str(p.relative_to(folder)): (p.readlink().as_posix().encode() if p.is_symlink() else p.read_bytes())
            for p in sorted(folder.rglob("*")) if p.is_symlink() or p.is_file()}


@pytest.fixture
def own(model, clip, tmp_path) -> Path:
    """A folder of its own with a copy of the clip and of the model pair, and links and a hard link to them."""
    import os
    import shutil

    shutil.copyfile(clip, tmp_path / "in.avi")
    shutil.copyfile(model, tmp_path / "m.onnx")
    shutil.copyfile(f"{model}.json", tmp_path / "m.onnx.json")
    (tmp_path / "sub").mkdir()
    (tmp_path / "link.avi").symlink_to("in.avi")
    (tmp_path / "model-link.avi").symlink_to("m.onnx")
    (tmp_path / "sidecar-link.jsonl").symlink_to("m.onnx.json")
    os.link(tmp_path / "in.avi", tmp_path / "hard.avi")
    return tmp_path


@pytest.mark.parametrize("args, words", [
    (["in.avi", "in.avi"], "the annotated video in.avi is the source video"),
    (["in.avi", "link.avi"], "the annotated video link.avi is the source video"),  # a symlink to the input
    (["in.avi", "hard.avi"], "the annotated video hard.avi is the source video"),  # a hard link: the same inode
    (["in.avi", "sub/../in.avi"], "is the source video"),
    (["file://in.avi", "in.avi"], "is the source video"),
    (["link.avi", "in.avi"], "is the source video"),
    (["in.avi", "model-link.avi"], "is the model"),
    (["in.avi", "--results", "in.avi"], "--results in.avi is the source video"),
    (["in.avi", "--results", "m.onnx"], "--results m.onnx is the model"),
    (["in.avi", "--results", "m.onnx.json"], "--results m.onnx.json is the model's sidecar"),
    (["in.avi", "--results", "sidecar-link.jsonl"], "is the model's sidecar"),
    (["in.avi", "new.avi", "--results", "new.avi"], "--results new.avi is the annotated video"),
])
def test_stream_never_writes_over_what_it_reads(own, args, words):
    """OUTPUT or --results naming the source, the model or its sidecar (by path, link or inode), or each other:
    refused in one line before anything is opened for writing; every file stays as it was."""
    before = snapshot(own)
    proc = run_cli("stream", *args, "--model", "m.onnx", check=False, cwd=own)
    assert proc.returncode == 1 and words in proc.stderr, proc.stderr[-1500:]
    assert len(proc.stderr.strip().splitlines()) == 1 and proc.stdout == ""
    assert snapshot(own) == before  # nothing truncated, appended to or created


def test_stream_reads_the_model_s_sidecar_through_its_own_name(own):
    """The refusal compares what is read: a results file beside the model that is not its sidecar is fine."""
    proc = run_cli("stream", "in.avi", "--model", "m.onnx", "--results", "m.onnx.jsonl", "--max-frames", "2", cwd=own)
    assert proc.stdout == "" and len(rows((own / "m.onnx.jsonl").read_text())) == 2


@pytest.mark.parametrize("where, words", [("missing/out.avi", "does not exist"),
                                          ("in.avi/out.avi", "is not a folder"),
                                          ("/proc/mlit-edge-out.avi", "cannot write the annotated video's folder")])
def test_an_output_folder_that_cannot_be_written_is_refused_before_the_first_frame(own, where, words):
    before = snapshot(own)
    proc = run_cli("stream", "in.avi", where, "--model", "m.onnx", check=False, cwd=own)
    assert proc.returncode == 1 and words in proc.stderr, proc.stderr[-1500:]
    assert len(proc.stderr.strip().splitlines()) == 1 and proc.stdout == ""  # no frame was classified first
    assert snapshot(own) == before


class StalledCapture:
    """A live source whose read() blocks until `unblock` is set: a server that stopped sending mid-stream."""

    def __init__(self) -> None:
        self.reading, self.unblock, self.released = threading.Event(), threading.Event(), threading.Event()
        self.in_read = self.released_in_read = False

    def read(self):
        self.in_read = True
        self.reading.set()
        self.unblock.wait(60)
        self.in_read = False
        return False, None

    def get(self, prop):
        return 0.0

    def release(self):
        self.released_in_read |= self.in_read
        self.released.set()


def test_close_never_releases_a_capture_while_another_thread_reads_it(monkeypatch):
    """close() used to wait 5 s for the grabbing thread and then release the capture under its read(): a
    SIGSEGV or an abort on SIGTERM. It now returns without releasing; the thread releases it once read() returns."""
    import mlit_edge.runtime.video as video

    monkeypatch.setattr(video, "CLOSE_WAIT_S", 0.3, raising=False)
    cap = StalledCapture()
    monkeypatch.setattr(FrameReader, "_capture", lambda self: cap)
    reader = FrameReader(VideoSource("rtsp://cam", "stream", "rtsp://cam", "any", True)).open()
    assert cap.reading.wait(10)
    start = time.monotonic()
    reader.close()
    assert time.monotonic() - start < 10 and not cap.released.is_set(), "released under a blocked read()"
    cap.unblock.set()  # the read returns: the thread, which owns the capture, releases it
    assert cap.released.wait(10) and not cap.released_in_read


def stalled_server(data: bytes, send: int) -> tuple[http.server.ThreadingHTTPServer, threading.Event]:
    """An HTTP server that announces all of `data`, sends its first `send` bytes and then holds the connection
    open, sending nothing (a camera or relay that hung); set the event to let it go."""
    hang = threading.Event()

    class Stalled(http.server.BaseHTTPRequestHandler):
        def log_message(self, *a):
            pass

        def do_GET(self):
            self.send_response(200)
            self.send_header("Content-Type", "video/x-msvideo")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data[:send])
            self.wfile.flush()
            hang.wait(120)

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Stalled)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, hang


@pytest.mark.slow
def test_sigterm_while_a_live_source_is_stalled_exits_143_with_whole_lines(model, tmp_path):
    """SIGTERM while the grabbing thread is blocked in read() on a stalled stream: close() used to release the
    capture under that read (SIGSEGV in 4 of 7 runs here). Now: exit 143, no crash, every line whole JSON."""
    data = write_video(tmp_path / "long.avi", 300).read_bytes()
    server, hang = stalled_server(data, len(data) // 3)
    results = tmp_path / "r.jsonl"
    try:
        proc = subprocess.Popen([*CLI, "stream", f"http://127.0.0.1:{server.server_address[1]}/v.avi", "--model",
                                 str(model), "--results", str(results)], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, env=ENV)
        size, still_since = -1, time.monotonic()
        while time.monotonic() - still_since < 1.5:  # until rows stop coming: the read is blocked
            assert proc.poll() is None, proc.communicate()[1][-1500:]
            now = results.stat().st_size if results.exists() else 0
            if now != size or now == 0:
                size, still_since = now, time.monotonic()
            time.sleep(0.1)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    finally:
        hang.set()
        server.shutdown()
    if "cannot open the stream" in err:
        pytest.skip("this OpenCV wheel's FFmpeg reads no HTTP")
    assert proc.returncode == 143, err[-1500:]
    assert rows(results.read_text()) and results.read_text().endswith("\n")
    assert "stalled in a read" in err and "Traceback" not in err
