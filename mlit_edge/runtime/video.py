"""Video sources for the torch-free runtime: video files, V4L2 and CSI cameras, RTSP/HTTP streams and raw
GStreamer pipelines, all decoded by OpenCV, which is imported here only, and only when a video source is used.

A **file** is read frame by frame and every frame is handed on; a frame that does not decode is skipped and
counted, and so is a run of them, however long, when good frames follow (a run ends the file only at the
header's frame count, or past `BAD_RUN_S` of video). A frame over `max_pixels` is skipped and counted the
same way, by the capture's stated size before a file is read and by each decoded frame's shape; a live MJPEG
stream over HTTP is read by `mjpeg.py`, which checks each JPEG's header before decoding. The first
`FIRST_FAILED` skipped frames' numbers are kept (`failed`); with `failures=True` a file's skipped frames are
handed on too, in their place, each without an image and with its `error`. A **live** source (a camera or a
stream) is read by a thread of its own that keeps only the newest frame: the classifier always gets the
latest one, latency cannot grow with a backlog, and every frame replaced before it was taken is counted as
dropped. A live source that stops delivering is reopened with a capped exponential backoff, forever, with a
line each time, so a flaky camera never ends the process (nor crash-loops a service). That thread owns the
live capture: only it reads and releases it, since releasing a capture under another thread's read()
crashes OpenCV (SIGSEGV or abort). `close()` waits `CLOSE_WAIT_S` for it; a read still blocked then (a
stalled source) is left to return on its own, or to the process exit (`stalled_at_close`).
"""
from __future__ import annotations

import logging
import os
import threading
import time
from dataclasses import dataclass
from typing import Iterator

import numpy as np

from .images import DEFAULT_MAX_PIXELS, pixel_limit
from .mjpeg import MjpegCapture, open_mjpeg
from .sources import LIVE_SCHEMES, VIDEO_SUFFIXES, SourceError, VideoSource, csi_pipeline, parse_source

__all__ = ["LIVE_SCHEMES", "VIDEO_SUFFIXES", "Frame", "FrameReader", "SourceError", "VideoSource", "csi_pipeline",
           "import_cv2", "parse_source"]

logger = logging.getLogger(__name__)

FIRST_FAILED = 10  # [ours] skipped frames whose numbers are kept for the status line and the summary
MAX_BAD_READS = 25  # failed reads after a file's header count (or without one) that end it
BAD_RUN_S = 600.0  # [ours] a run of undecodable frames this long (in video time) ends a file: a header that lies
BACKOFF_S = (0.5, 30.0)  # first and longest wait between reconnects of a live source
CLOSE_WAIT_S = 5.0  # how long close() waits for a live source's read() to return


def import_cv2():
    # FFmpeg's and OpenCV's own warnings would go to stderr around our one-line errors, and a damaged frame
    # is counted instead; set either variable to see them (e.g. OPENCV_FFMPEG_LOGLEVEL=24 for warnings)
    os.environ.setdefault("OPENCV_FFMPEG_LOGLEVEL", "-8")
    os.environ.setdefault("OPENCV_LOG_LEVEL", "SILENT")
    try:
        import cv2
    except ImportError:
        raise SourceError("video sources need OpenCV: pip install 'mlit-edge[video]' (opencv-python-headless); "
                          "on a Jetson, JetPack's OpenCV with GStreamer (deploy/install-jetson.sh)") from None
    return cv2


@dataclass
class Frame:
    index: int  # the frame's place in the source, counting every frame read (dropped ones too)
    timestamp_s: float  # the source's timestamp (a file's position; a live frame's arrival since the start)
    image: np.ndarray | None  # uint8 (H, W, 3), RGB; None for a frame that was skipped (`error` says why)
    read_at: float  # time.perf_counter() when it was decoded, for latency
    error: str | None = None


class FrameReader:
    """The frames of one source, as the module docstring says; `dropped`, `corrupt` and `reconnects` count
    what did not reach the caller (`failed`: the first skipped frames' numbers). With `failures`, a file's
    skipped frames are handed on too, each with its `error`. Use as a context manager; `stop()` ends the
    iteration early."""

    def __init__(self, source: VideoSource, open_timeout_s: float = 10.0,
                 max_pixels: int | None = DEFAULT_MAX_PIXELS, failures: bool = False) -> None:
        self.source, self.cv2 = source, import_cv2()
        self.open_timeout_s, self.max_pixels, self.failures = open_timeout_s, max_pixels, failures
        self.dropped = self.corrupt = self.reconnects = self.read = 0
        self.failed: list[int] = []
        self.truncated = self.stalled_at_close = False
        self.cut_after: int | None = None  # a truncated file's last frame that decoded
        self._fps = 30.0
        self._stop = threading.Event()
        self._cap = None  # a file's capture; a live source's belongs to its thread (_live_cap)
        self._live_cap = None
        self._latest: Frame | None = None
        self._cond = threading.Condition()
        self._thread: threading.Thread | None = None

    # -- opening ---------------------------------------------------------------------------------------

    def _capture(self):
        cv2, src = self.cv2, self.source
        if src.kind == "stream" and str(src.target).startswith(("http://", "https://")):
            mjpeg = open_mjpeg(str(src.target), self.open_timeout_s, self.max_pixels, self._stop.is_set, cv2)
            if mjpeg != "other":  # an MJPEG stream we read ourselves, or no answer (OpenCV would get none)
                return mjpeg if isinstance(mjpeg, MjpegCapture) else None
        api = {"any": cv2.CAP_ANY, "v4l2": cv2.CAP_V4L2, "gstreamer": cv2.CAP_GSTREAMER}[src.api]
        params = []
        if src.kind == "stream":  # OpenCV's FFmpeg backend would otherwise wait 30 s on a dead host
            ms = int(self.open_timeout_s * 1000)
            params = [cv2.CAP_PROP_OPEN_TIMEOUT_MSEC, ms, cv2.CAP_PROP_READ_TIMEOUT_MSEC, ms]
        cap = cv2.VideoCapture(src.target, api, params)
        if not cap.isOpened():
            cap.release()
            return None
        return cap

    def open(self) -> "FrameReader":
        """Open the source, and for a file decode its first frame, so a bad source fails here in one line."""
        self._cap = self._capture()
        if self._cap is None:
            what = {"file": "cannot open the video (not a video, or no decoder for its format in this OpenCV)",
                    "csi": "cannot open the CSI camera (needs a Jetson, and OpenCV built with GStreamer)",
                    "v4l2": "cannot open the camera (missing device, busy, or no permission: the video group)",
                    "gstreamer": "cannot open the pipeline (OpenCV needs GStreamer support: cv2.getBuildInformation())",
                    "stream": "cannot open the stream (unreachable, refused, or a format OpenCV cannot read)"}
            raise SourceError(f"{self.source.uri}: {what[self.source.kind]}")
        fps = self._cap.get(self.cv2.CAP_PROP_FPS)  # read now: once a live thread reads it, nobody else may
        self._fps = float(fps) if fps and 0 < fps < 1000 else 30.0
        if not self.source.live:
            self._check_stated_size()
            ok, first = self._cap.read()
            if not ok:
                self.close()
                raise SourceError(f"{self.source.uri}: no frame decodes (an unsupported codec, or an empty file)")
            self._first = first
        else:  # the thread owns the capture from here on
            cap, self._cap = self._cap, None
            self._thread = threading.Thread(target=self._grab_live, args=(cap,), name="frame-grabber", daemon=True)
            self._thread.start()
        return self

    @property
    def fps(self) -> float:
        """The source's frame rate (30 where it does not say), as it said when opened."""
        return self._fps

    @property
    def frame_count(self) -> int | None:
        """A file's frame count from its header (None for live sources; a header can be wrong)."""
        if self.source.live or self._cap is None:
            return None
        n = int(self._cap.get(self.cv2.CAP_PROP_FRAME_COUNT))
        return n if n > 0 else None

    def _check_stated_size(self) -> None:
        """Refuse a file whose stated frame size is over the pixel limit: every frame would be decoded at it."""
        cv2 = self.cv2
        w, h = int(self._cap.get(cv2.CAP_PROP_FRAME_WIDTH)), int(self._cap.get(cv2.CAP_PROP_FRAME_HEIGHT))
        if self.max_pixels is not None and w * h > self.max_pixels:
            self.close()
            raise SourceError(f"{self.source.uri}: its frames are {w}x{h}, over the limit of "
                              f"{pixel_limit(self.max_pixels)} (raise it with --max-pixels)")

    # -- reading ---------------------------------------------------------------------------------------

    def _skip(self, reason: str, index: int | None = None) -> list[Frame]:
        """Count a frame that is not handed on, with a line at the 1st, 10th, 100th... (the status line has the
        count); for a file's frame `index` with `failures`, [the Frame that says so]."""
        with self._cond:
            self.corrupt += 1
            n = self.corrupt
            if index is not None and len(self.failed) < FIRST_FAILED:
                self.failed.append(index)
        if str(n).strip("0") == "1":
            logger.warning(f"{self.source.uri}: skipped {'' if index is None else f'frame {index}: '}{reason} "
                           f"({n} frame{'s' if n > 1 else ''} skipped so far)")
        return [Frame(index, index / self.fps, None, time.perf_counter(), reason)] \
            if index is not None and self.failures else []

    def _oversized(self, bgr: np.ndarray) -> str | None:
        """Why a decoded frame is skipped (over the pixel limit), or None when it is within it."""
        h, w = bgr.shape[:2]
        over = self.max_pixels is not None and w * h > self.max_pixels
        return f"a {w}x{h} frame, over the limit of {pixel_limit(self.max_pixels)}" if over else None

    def _rgb(self, bgr: np.ndarray) -> np.ndarray:
        return self.cv2.cvtColor(bgr, self.cv2.COLOR_BGR2RGB) if bgr.ndim == 3 else np.repeat(bgr[:, :, None], 3, 2)

    def _file_frames(self) -> Iterator[Frame]:
        cap, index, total, bad = self._cap, 0, self.frame_count, 0
        pending, self._first = self._first, None
        longest_run = max(MAX_BAD_READS, int(BAD_RUN_S * self.fps))
        while not self._stop.is_set():
            ok, bgr = (True, pending) if pending is not None else cap.read()
            pending = None
            if not ok:  # read on through a run within the header's count; past it (or without one), a short run
                if bad >= (longest_run if total is not None and index < total else MAX_BAD_READS):
                    break
                bad, index = bad + 1, index + 1
                continue
            if bad:  # a good frame after a run: the run was corrupt frames, not the end
                yield from self._skip_run(index - bad, bad)
                bad = 0
            i, index = index, index + 1
            why = self._oversized(bgr)
            if why:
                yield from self._skip(why, i)
                continue
            t = cap.get(self.cv2.CAP_PROP_POS_MSEC) / 1000.0
            self.read += 1
            yield Frame(i, t if t > 0 or i == 0 else i / self.fps, self._rgb(bgr), time.perf_counter())
        if not self._stop.is_set():  # stopped mid-run, the run says nothing of the file's end
            yield from self._end_of_file(index, total, bad)

    def _skip_run(self, first: int, n: int) -> Iterator[Frame]:
        for i in range(first, first + n):
            yield from self._skip("does not decode", i)

    def _end_of_file(self, index: int, total: int | None, bad: int) -> Iterator[Frame]:
        """Failures that run to the end: within the frames the header lists they are counted (the file is cut
        short or corrupt to its end); past them, or without a count, they are only the end of the file."""
        listed = min(bad, max(0, (total or 0) - (index - bad)))
        if listed:
            self.truncated, self.cut_after = True, index - bad - 1
            logger.warning(f"{self.source.uri}: nothing decodes after frame {index - bad - 1} of the {total} its "
                           f"header lists: the file is truncated, or corrupt from there (frames {index - bad} to "
                           f"{index - bad + listed - 1} counted)")
            yield from self._skip_run(index - bad, listed)

    def _grab_live(self, cap) -> None:
        """The grabbing thread: reads, reconnects and finally releases `cap`, which no other thread touches."""
        self._live_cap = cap
        try:
            self._grab()
        finally:
            if self._live_cap is not None:
                self._live_cap.release()
                self._live_cap = None

    def _grab(self) -> None:
        index, start, wait = 0, time.perf_counter(), BACKOFF_S[0]
        while not self._stop.is_set():
            ok, bgr = self._live_cap.read() if self._live_cap is not None else (False, None)
            if self._stop.is_set():
                break
            why = (self._live_cap.skip_reason if bgr is None else self._oversized(bgr)) if ok else None
            if why:  # a part the MJPEG reader skipped before decoding it, or a frame over the limit
                self._skip(why)
                continue
            if not ok:
                logger.warning(f"{self.source.uri}: no frame; reconnecting in {wait:g} s")
                if self._live_cap is not None:
                    self._live_cap.release()
                    self._live_cap = None
                if self._stop.wait(wait):
                    break
                wait = min(wait * 2, BACKOFF_S[1])
                self._live_cap = self._capture()
                self.reconnects += 1
                if self._live_cap is not None:
                    logger.warning(f"{self.source.uri}: reconnected")
                continue
            wait = BACKOFF_S[0]
            now = time.perf_counter()
            frame, index = Frame(index, now - start, self._rgb(bgr), now), index + 1
            with self._cond:
                self.read += 1
                if self._latest is not None:
                    self.dropped += 1  # never taken: a newer frame replaces it
                self._latest = frame
                self._cond.notify()

    def _live_frames(self) -> Iterator[Frame]:
        while not self._stop.is_set():
            with self._cond:
                if self._latest is None:
                    self._cond.wait(timeout=0.2)
                frame, self._latest = self._latest, None
            if frame is not None:
                yield frame

    def __iter__(self) -> Iterator[Frame]:
        return self._live_frames() if self.source.live else self._file_frames()

    def stop(self) -> None:
        self._stop.set()
        with self._cond:
            self._cond.notify_all()

    def close(self) -> None:
        """Stop; a file's capture is released here, a live one by its thread, which is given `CLOSE_WAIT_S`
        to leave its read(); one still blocked then is left to the process exit, never released under it."""
        self.stop()
        if self._thread is not None:
            self._thread.join(timeout=CLOSE_WAIT_S)
            if self._thread.is_alive():
                self.stalled_at_close = True
                logger.warning(f"{self.source.uri}: the source is stalled in a read; leaving it to return on its "
                               "own (or to the process exit)")
        if self._cap is not None:
            self._cap.release()
            self._cap = None

    def __enter__(self) -> "FrameReader":
        return self.open()

    def __exit__(self, *exc) -> None:
        self.close()
