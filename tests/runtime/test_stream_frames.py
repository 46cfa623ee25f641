"""`mlit-edge stream` against hostile frames: an oversized frame in a live MJPEG stream (checked from its JPEG
header, never decoded) or in a file, a multipart part that never ends, and runs of undecodable frames.
Each is skipped and counted as corrupt, and the run reads on."""
import functools
import http.server
import itertools
import json
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

cv2 = pytest.importorskip("cv2")
pytest.importorskip("onnx")

from mlit_edge.runtime import mjpeg  # noqa: E402
from mlit_edge.runtime.mjpeg import jpeg_size, part_cap  # noqa: E402
from mlit_edge.runtime.video import FrameReader, parse_source  # noqa: E402
from tests.helpers import ENV, cli, run_cli  # noqa: E402

# the CLI with its peak resident memory (VmHWM: this program's own, unlike ru_maxrss, which keeps the peak of
# the forking pytest process across exec) printed last on stderr
PEAK = ("import re, runpy, sys\nsys.argv[0] = 'mlit-edge'\ntry:\n    runpy.run_module('mlit_edge.cli', "
        "run_name='__main__')\nfinally:\n    print('peak_kb', re.search(r'VmHWM:\\s*(\\d+)', "
        "open('/proc/self/status').read())[1], file=sys.stderr)\n")


@pytest.fixture(scope="module")
def model(tiny_onnx) -> Path:
    return tiny_onnx


def jpeg(value: int, side: int = 72) -> bytes:
    return cv2.imencode(".jpg", np.full((side, side, 3), value % 256, np.uint8))[1].tobytes()


def claims(data: bytes, width: int, height: int) -> bytes:
    """`data` (a JPEG) with its SOF marker rewritten to claim width x height: a few hundred bytes that say 256 MP."""
    out = bytearray(data)
    at = out.index(b"\xff\xc0")
    out[at + 5:at + 9] = struct.pack(">HH", height, width)
    return bytes(out)


def serve_parts(parts) -> http.server.ThreadingHTTPServer:
    """A multipart MJPEG server: each GET gets `parts()` (bytes, or (bytes, False) for a part without a
    Content-Length), one every 20 ms, then 72x72 frames until the client goes."""

    class Mjpeg(http.server.BaseHTTPRequestHandler):
        def log_message(self, *a):
            pass

        def do_GET(self):
            self.send_response(200)
            self.send_header("Content-Type", "multipart/x-mixed-replace; boundary=frame")
            self.end_headers()
            try:
                for part in itertools.chain(parts(), (jpeg(i) for i in itertools.count())):
                    data, length = part if isinstance(part, tuple) else (part, True)
                    head = b"--frame\r\nContent-Type: image/jpeg\r\n" + (b"Content-Length: %d\r\n" % len(data)
                                                                         if length else b"")
                    self.wfile.write(head + b"\r\n" + data + b"\r\n")
                    self.wfile.flush()
                    time.sleep(0.02)
            except OSError:  # the client went
                pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Mjpeg)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def url(server) -> str:
    return f"http://127.0.0.1:{server.server_address[1]}/video.mjpg"


def chunk(fourcc: bytes, data: bytes) -> bytes:
    return fourcc + struct.pack("<I", len(data)) + data + b"\0" * (len(data) % 2)


def mjpeg_avi(path: Path, frames: list[bytes], side: int = 72, fps: int = 10) -> Path:
    """An AVI (MJPG) of these JPEGs whatever their own sizes, stated as side x side: what a recorder may write."""
    n = len(frames)
    avih = struct.pack("<14I", 1_000_000 // fps, 0, 0, 0x10, n, 0, 1, 0, side, side, 0, 0, 0, 0)
    strh = b"vidsMJPG" + struct.pack("<IHHIIIIIIII4h", 0, 0, 0, 0, 1, fps, 0, n, 0, 0xFFFFFFFF, 0, 0, 0, side, side)
    strf = struct.pack("<IiiHH4sIiiII", 40, side, side, 1, 24, b"MJPG", side * side * 3, 0, 0, 0, 0)
    strl = chunk(b"LIST", b"strl" + chunk(b"strh", strh) + chunk(b"strf", strf))
    hdrl = chunk(b"LIST", b"hdrl" + chunk(b"avih", avih) + strl)
    movi, index, offset = b"", b"", 4
    for data in frames:
        index += b"00dc" + struct.pack("<III", 0x10, offset, len(data))
        movi += chunk(b"00dc", data)
        offset += 8 + len(data) + len(data) % 2
    body = b"AVI " + hdrl + chunk(b"LIST", b"movi" + movi) + chunk(b"idx1", index)
    path.write_bytes(b"RIFF" + struct.pack("<I", len(body)) + body)
    return path


def rows(text: str) -> list[dict]:
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def test_jpeg_size_reads_the_frame_header_and_the_part_cap_follows_the_limit():
    small = jpeg(9, 40)
    assert jpeg_size(small) == (40, 40) and jpeg_size(claims(small, 16000, 12000)) == (16000, 12000)
    assert jpeg_size(b"\x89PNG\r\n") is None and jpeg_size(small[:20]) is None and jpeg_size(b"") is None
    assert part_cap(50_000_000) == 150_000_000 + (1 << 20) and part_cap(None) > part_cap(50_000_000)


@pytest.mark.slow
def test_a_16000_px_first_frame_of_a_live_mjpeg_stream_is_skipped_and_the_stream_reads_on(model):
    """It used to end the run with rc 1 at a peak of 3.1 GB: FFmpeg sized the stream by that frame and made every
    later frame 16000 x 16000 too."""
    big = cv2.imencode(".jpg", np.full((16000, 16000), 128, np.uint8))[1].tobytes()  # 3 MB
    server = serve_parts(lambda: [big])
    try:
        proc = subprocess.run([sys.executable, "-c", PEAK, "stream", url(server), "--model", str(model),
                               "--max-frames", "3"], capture_output=True, text=True, env=ENV, timeout=120)
    finally:
        server.shutdown()
    assert proc.returncode == 0, proc.stderr[-1500:]
    assert len(rows(proc.stdout)) == 3 and "skipped a 16000x16000 frame, over the limit of 50.0 MP" in proc.stderr
    assert "corrupt 1" in proc.stderr.splitlines()[-2]  # the last status line
    assert int(proc.stderr.split("peak_kb")[-1]) < 400_000  # KB: nothing of the 768 MB frame was decoded


def test_an_oversized_part_is_never_decoded_and_a_part_without_an_end_never_buffered(monkeypatch):
    """A part claiming 16000 x 16000 is refused from its header (imdecode is never called on it); a part with no
    Content-Length that runs on for 8 MB, past the 1.1 MB cap of a 10,000 px limit, is dropped as it comes."""
    bomb = claims(jpeg(1, 40), 16000, 16000)
    endless = (b"\xff\xd8" + b"\x00" * (8 << 20), False)
    server = serve_parts(lambda: [bomb, endless])
    decoded, held = [], [0]
    real, real_fill = cv2.imdecode, mjpeg._Buffered.fill

    def fill(self):
        real_fill(self)
        held[0] = max(held[0], len(self.buf))

    def imdecode(buf, flags):
        assert len(buf) != len(bomb), "the oversized part was decoded"
        decoded.append(len(buf))
        return real(buf, flags)

    monkeypatch.setattr(cv2, "imdecode", imdecode)
    monkeypatch.setattr(mjpeg._Buffered, "fill", fill)
    try:
        with FrameReader(parse_source(url(server)), max_pixels=10_000) as reader:
            frame = next(iter(reader))
            assert frame.image.shape == (72, 72, 3) and reader.corrupt == 2 and decoded
    finally:
        server.shutdown()
    assert held[0] <= part_cap(10_000) + (1 << 16) < 2 << 20, f"{held[0]} bytes held: the endless part was buffered"


def test_a_file_stated_over_the_limit_is_refused_before_a_frame_is_decoded(model, tmp_path):
    """OpenCV states (and decodes) a file's frames at the size of its first: a 16000 x 16000 first frame made every
    frame that size and ended the run with rc 1 at 2.6 GB. A stated size over the limit is now one line."""
    clip = mjpeg_avi(tmp_path / "big-first.avi", [jpeg(0, 200)] + [jpeg(i) for i in range(1, 12)])
    proc = run_cli("stream", clip, "--model", model, "--max-pixels", "10000", check=False)
    assert proc.returncode == 1 and "its frames are 200x200, over the limit of 10,000 px" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


class ShapeShifter:
    """A file whose frame 2 decodes larger than the size it states (a resolution change mid-stream)."""

    def __init__(self) -> None:
        self.n = 0

    def read(self):
        self.n += 1
        side = 300 if self.n == 3 else 72
        return (True, np.full((side, side, 3), self.n, np.uint8)) if self.n <= 5 else (False, None)

    def get(self, prop):
        return {cv2.CAP_PROP_FRAME_WIDTH: 72, cv2.CAP_PROP_FRAME_HEIGHT: 72, cv2.CAP_PROP_FRAME_COUNT: 5,
                cv2.CAP_PROP_FPS: 10}.get(prop, 0.0)

    def release(self):
        pass


def test_a_decoded_frame_over_the_limit_is_skipped_and_counted(monkeypatch, tmp_path):
    monkeypatch.setattr(FrameReader, "_capture", lambda self: ShapeShifter())
    (tmp_path / "a.avi").write_bytes(b"x")
    with FrameReader(parse_source(str(tmp_path / "a.avi")), max_pixels=10_000) as reader:
        assert [f.index for f in reader] == [0, 1, 3, 4] and reader.corrupt == 1 and not reader.truncated


def test_a_run_of_undecodable_frames_is_skipped_and_counted_and_the_file_reads_on(model, tmp_path):
    """40 undecodable frames used to end the file at the 25th ("truncated", and "corrupt 0"), losing the 30 good
    frames after them; 20 undecodable frames at the end are counted, not reported as "corrupt 0"."""
    good = [jpeg(i * 37) for i in range(80)]
    bad = [b"\xff\xd8" + bytes(len(g) - 2) for g in good]
    proc = run_cli("stream", mjpeg_avi(tmp_path / "run.avi", good[:10] + bad[10:50] + good[50:]), "--model", model)
    assert [r["frame"] for r in rows(proc.stdout) if "class" in r] == [*range(10), *range(50, 80)], proc.stderr[-800:]
    assert [r["frame"] for r in rows(proc.stdout) if "error" in r] == [*range(10, 50)]  # each failure in its place
    assert "corrupt 40 (frames 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, ...)" in proc.stderr
    assert "truncated" not in proc.stderr and "nothing decodes" not in proc.stderr
    proc = run_cli("stream", mjpeg_avi(tmp_path / "tail.avi", good[:60] + bad[60:]), "--model", model)
    assert len([r for r in rows(proc.stdout) if "class" in r]) == 60
    assert "corrupt 20 (frames 60, 61, 62, 63, 64, 65, 66, 67, 68, 69, ...) | nothing decodes after frame 59" \
        in proc.stderr


def test_an_http_source_that_is_not_multipart_still_goes_to_opencv(monkeypatch, tmp_path):
    """The MJPEG reader only takes multipart answers: an AVI served over HTTP is OpenCV's, as before."""
    import mlit_edge.runtime.video as video

    (tmp_path / "a.avi").write_bytes(b"RIFF")
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(tmp_path))
    handler.log_message = lambda *a: None
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        got = video.open_mjpeg(f"http://127.0.0.1:{server.server_address[1]}/a.avi", 5, 10_000, lambda: False, cv2)
        dead = video.open_mjpeg("http://127.0.0.1:9/x", 5, 10_000, lambda: False, cv2)
    finally:
        server.shutdown()
    assert got == "other" and dead == "unreachable"


def test_a_live_mjpeg_stream_with_a_bomb_and_parts_of_other_sizes_is_classified_and_annotated(model, tmp_path):
    """A 600-byte part claiming 16000 x 16000 is skipped (the status line counts it), and a 100 x 100 part among
    72 x 72 ones is drawn into the annotated video at the video's size."""
    server = serve_parts(lambda: [claims(jpeg(3, 40), 16000, 16000), jpeg(5, 100)])
    try:
        proc = cli("stream", url(server), tmp_path / "out.avi", "--model", model, "--max-frames", "6", timeout=120)
    finally:
        server.shutdown()
    assert len(rows(proc.stdout)) == 6 and "| corrupt 1" in proc.stderr.splitlines()[-1]
    cap, frames = cv2.VideoCapture(str(tmp_path / "out.avi")), 0
    while cap.read()[0]:
        frames += 1
    assert frames >= 6
