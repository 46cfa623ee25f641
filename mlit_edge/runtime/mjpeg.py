"""Live MJPEG over HTTP (`multipart/x-mixed-replace`: what IP cameras, ESP32-CAMs and `motion` serve), read
here rather than by OpenCV's FFmpeg, so that nothing hostile is decoded.

FFmpeg sizes the whole stream by its first frame: a first part of 16000 x 16000 made every frame 768 MB
and ended the run at 3.1 GB. Here each part is capped at `part_cap(max_pixels)` bytes (a part that never
ends is skipped, not buffered), and each JPEG's size is read from its SOF marker and checked against
`max_pixels` before `cv2.imdecode`. A part that fails either check, or does not decode, is skipped and
counted by the reader (`read()` returns `(True, None)` with `skip_reason` set), and the stream reads on.
"""
from __future__ import annotations

import base64
import ssl
import urllib.error
import urllib.parse
import urllib.request
from typing import Callable

import numpy as np

from .images import pixel_limit

SOF = frozenset(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC}  # start-of-frame markers (not DHT, JPG, DAC)
STANDALONE = frozenset([0x01, *range(0xD0, 0xD9)])  # TEM, RSTn, SOI: markers without a length
LINE_MAX = 8192  # [ours] the longest delimiter or header line read
HEADERS_MAX = 64  # [ours] header lines in one part
FFMPEG_MAX_PIXELS = 1 << 28  # about the most pixels FFmpeg decodes (av_image_check_size): the cap without a limit


class StreamEnded(Exception):
    """The connection ended, broke or timed out, or the reader was stopped: the caller reconnects."""


def jpeg_size(data: bytes) -> tuple[int, int] | None:
    """(width, height) from a JPEG's SOF marker; None when `data` is no JPEG or has none before its scan."""
    if data[:2] != b"\xff\xd8":
        return None
    i = 2
    while i + 4 <= len(data):
        if data[i] != 0xFF:
            return None
        marker = data[i + 1]
        if marker == 0xFF:  # a fill byte before a marker
            i += 1
        elif marker in STANDALONE:
            i += 2
        elif marker in SOF:
            return (int.from_bytes(data[i + 7:i + 9], "big"), int.from_bytes(data[i + 5:i + 7], "big")) \
                if i + 9 <= len(data) else None
        elif marker == 0xDA:  # scan data: no frame header came before it
            return None
        else:
            i += 2 + int.from_bytes(data[i + 2:i + 4], "big")
    return None


def part_cap(max_pixels: int | None) -> int:
    """The most bytes one part may hold: the pixel limit as uncompressed RGB, plus 1 MiB of headers (a JPEG
    larger than its own raw pixels is no camera's)."""
    return 3 * (max_pixels or FFMPEG_MAX_PIXELS) + (1 << 20)


class _Buffered:
    """Reads lines and byte counts from an HTTP response, never holding more than one bounded part."""

    def __init__(self, response, stopped: Callable[[], bool]) -> None:
        self.response, self.stopped, self.buf = response, stopped, bytearray()

    def fill(self) -> None:
        if self.stopped():
            raise StreamEnded("stopped")
        try:
            chunk = self.response.read1(1 << 16)
        except (OSError, ValueError) as e:  # a timeout, a reset, or a response closed under us
            raise StreamEnded(str(e)) from None
        if not chunk:
            raise StreamEnded("the stream ended")
        self.buf += chunk

    def line(self) -> bytes:
        while (end := self.buf.find(b"\n")) < 0:
            if len(self.buf) > LINE_MAX:
                raise StreamEnded("a line without an end: not an MJPEG stream")
            self.fill()
        out = bytes(self.buf[:end + 1])
        del self.buf[:end + 1]
        return out

    def take(self, n: int) -> bytes:
        while len(self.buf) < n:
            self.fill()
        out = bytes(self.buf[:n])
        del self.buf[:n]
        return out

    def skip(self, n: int) -> None:
        while n > 0:
            if not self.buf:
                self.fill()
            k = min(n, len(self.buf))
            del self.buf[:k]
            n -= k

    def until(self, delimiter: bytes, cap: int) -> bytes | None:
        """The bytes before `delimiter` (left unread); None when more than `cap` came first (those, and the
        rest up to the delimiter, are read and dropped)."""
        start, kept = 0, True
        while (at := self.buf.find(delimiter, start)) < 0:
            if len(self.buf) > cap:
                kept = False
                del self.buf[:len(self.buf) - len(delimiter)]  # keep a delimiter's worth: it may straddle reads
            start = max(0, len(self.buf) - len(delimiter))
            self.fill()
        out = bytes(self.buf[:at]) if kept and at <= cap else None
        del self.buf[:at]
        return out


class MjpegCapture:
    """The parts of one multipart MJPEG response as frames, through the calls FrameReader makes of a
    cv2.VideoCapture: read() -> (ok, BGR or None for a skipped part), get(), release()."""

    def __init__(self, response, boundary: str, max_pixels: int | None, stopped: Callable[[], bool], cv2) -> None:
        self.cv2, self.response, self.max_pixels = cv2, response, max_pixels
        self.boundary = boundary.strip().lstrip("-").encode("latin-1", "replace")
        self.input = _Buffered(response, stopped)
        self.cap, self.skip_reason = part_cap(max_pixels), ""

    def read(self) -> tuple[bool, np.ndarray | None]:
        try:
            data = self._part()
        except StreamEnded:
            return False, None
        if data is None:
            return True, None
        return True, self._decode(data)

    def _part(self) -> bytes | None:
        """The next part's body; None (with `skip_reason`) for one over the cap."""
        if self.input.until(b"--" + self.boundary, self.cap) is None:  # past a preamble or the last part's CRLF
            raise StreamEnded("no part delimiter: not an MJPEG stream")
        if self.input.line().strip().lstrip(b"-") == self.boundary + b"--":
            raise StreamEnded("the stream ended")
        length = None
        for _ in range(HEADERS_MAX):
            name, _, value = self.input.line().strip().partition(b":")
            if not name:
                break
            if name.strip().lower() == b"content-length" and value.strip().isdigit():
                length = int(value.strip())
        if length is None:
            data = self.input.until(b"\r\n--" + self.boundary, self.cap)
        elif length > self.cap:
            self.input.skip(length)
            data = None
        else:
            data = self.input.take(length)
        if data is None:
            self.skip_reason = f"a part over {self.cap / 1e6:.0f} MB (the pixel limit as raw RGB)"
        return data

    def _decode(self, data: bytes) -> np.ndarray | None:
        """The part's pixels as BGR, or None (with `skip_reason`): its header is read before anything is decoded."""
        size = jpeg_size(data)
        if size is None or 0 in size:
            self.skip_reason = "a part that is not a JPEG (no frame header)"
            return None
        w, h = size
        if self.max_pixels is not None and w * h > self.max_pixels:
            self.skip_reason = f"a {w}x{h} frame, over the limit of {pixel_limit(self.max_pixels)}"
            return None
        cv2 = self.cv2
        bgr = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR | cv2.IMREAD_IGNORE_ORIENTATION)
        if bgr is None:
            self.skip_reason = "a JPEG that does not decode"
        return bgr

    def get(self, prop) -> float:
        return 0.0  # a multipart stream states no frame rate nor size

    def isOpened(self) -> bool:  # noqa: N802 (cv2.VideoCapture's name)
        return True

    def release(self) -> None:
        self.response.close()


def _request(url: str) -> urllib.request.Request:
    """`url` without its user:password, which goes into a Basic Authorization header (urllib takes none in URLs)."""
    parts = urllib.parse.urlsplit(url)
    if parts.username is None:
        return urllib.request.Request(url)
    host = parts.hostname + (f":{parts.port}" if parts.port else "")
    clean = urllib.parse.urlunsplit(parts._replace(netloc=host))
    token = f"{urllib.parse.unquote(parts.username)}:{urllib.parse.unquote(parts.password or '')}"
    return urllib.request.Request(clean, headers={"Authorization": "Basic " + base64.b64encode(token.encode()).decode()})


def open_mjpeg(url: str, timeout_s: float, max_pixels: int | None, stopped: Callable[[], bool],
               cv2) -> MjpegCapture | str:
    """An MjpegCapture when `url` answers with a multipart MJPEG stream; else "other" (an HTTP answer of
    another kind, for OpenCV to open) or "unreachable" (no answer: OpenCV would get none either)."""
    try:
        response = urllib.request.urlopen(_request(url), timeout=timeout_s)
    except urllib.error.HTTPError:
        return "other"  # e.g. 401 for digest authentication, which FFmpeg does
    except (urllib.error.URLError, OSError, ValueError) as e:
        reason = getattr(e, "reason", e)
        if isinstance(reason, ssl.SSLError) or not isinstance(reason, OSError):
            return "other"  # e.g. a camera's self-signed certificate, which FFmpeg does not verify
        return "unreachable"
    boundary = response.headers.get_param("boundary")
    if response.headers.get_content_type() != "multipart/x-mixed-replace" or not isinstance(boundary, str) \
            or not boundary.strip("- "):
        response.close()
        return "other"
    return MjpegCapture(response, boundary, max_pixels, stopped, cv2)
