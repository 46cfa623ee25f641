"""Video sources for the torch-free runtime: video files, V4L2 and CSI cameras, RTSP/HTTP streams and raw
GStreamer pipelines, all decoded by OpenCV, which is imported here only, and only when a video source is used.

A **file** is read frame by frame and every frame is handed on; a frame that does not decode is skipped
and counted. A **live** source (a camera or a stream) is read by a thread of its own that keeps only the
newest frame: the classifier always gets the latest one, latency cannot grow with a backlog, and every
frame replaced before it was taken is counted as dropped. A live source that stops delivering is
reopened with a capped exponential backoff, forever, with a line each time, so a flaky camera never
ends the process (nor crash-loops a service). That thread owns the live capture: only it reads and
releases it, since releasing a capture under another thread's read() crashes OpenCV (SIGSEGV or abort).
`close()` waits `CLOSE_WAIT_S` for it; a read still blocked then (a stalled source) is left to return
on its own, or to the process exit (`stalled_at_close`).
"""
from __future__ import annotations

import logging
import os
import re
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import numpy as np

from .images import InputError

logger = logging.getLogger(__name__)

VIDEO_SUFFIXES = (".mp4", ".mkv", ".avi", ".mov", ".webm", ".m4v", ".mpg", ".mpeg", ".ts", ".wmv", ".flv")
LIVE_SCHEMES = ("rtsp://", "rtsps://", "rtmp://", "http://", "https://")
MAX_BAD_READS = 25  # consecutive failed reads that end a file (a truncated one) instead of skipping a frame
BACKOFF_S = (0.5, 30.0)  # first and longest wait between reconnects of a live source
CLOSE_WAIT_S = 5.0  # how long close() waits for a live source's read() to return


class SourceError(InputError):
    """A video source that cannot be opened or decoded: the message says which and why."""


@dataclass(frozen=True)
class VideoSource:
    """What `cv2.VideoCapture` opens for a source the user named, and how it is read."""

    uri: str  # as given
    kind: str  # file | v4l2 | csi | stream | gstreamer
    target: str | int  # a path, a device, a URL or a pipeline
    api: str  # OpenCV's backend: any | v4l2 | gstreamer
    live: bool  # newest frame only, drops counted; else every frame in order


def csi_pipeline(sensor: int, width: int = 1280, height: int = 720, fps: int = 30) -> str:
    """The GStreamer pipeline of a Jetson's MIPI CSI camera (`nvarguscamerasrc`), ending in BGR frames for
    OpenCV's appsink, which keeps one buffer and drops the rest."""
    return (f"nvarguscamerasrc sensor-id={sensor} ! video/x-raw(memory:NVMM), width=(int){width}, "
            f"height=(int){height}, framerate=(fraction){fps}/1 ! nvvidconv ! video/x-raw, format=(string)BGRx ! "
            "videoconvert ! video/x-raw, format=(string)BGR ! appsink drop=true max-buffers=1")


def parse_source(uri: str, width: int = 1280, height: int = 720, fps: int = 30) -> VideoSource:
    """`csi://0`, `/dev/video0` or `v4l2:///dev/video0`, `rtsp://...`, `http(s)://...`, a GStreamer pipeline
    (`gst://...` or any text with ` ! `), or a video file (`file://...` or a path). `width`, `height`
    and `fps` are the CSI camera's mode. Raises SourceError for what is none of these."""
    if uri.startswith("csi://"):
        sensor = uri[len("csi://"):]
        if not sensor.isdigit():
            raise SourceError(f"{uri}: a CSI camera is csi://N, N the sensor id (csi://0)")
        return VideoSource(uri, "csi", csi_pipeline(int(sensor), width, height, fps), "gstreamer", True)
    if uri.startswith("v4l2://") or re.fullmatch(r"/dev/video\d+", uri):
        device = uri[len("v4l2://"):] if uri.startswith("v4l2://") else uri
        if not re.fullmatch(r"/dev/video\d+", device):
            raise SourceError(f"{uri}: a V4L2 camera is /dev/videoN or v4l2:///dev/videoN")
        return VideoSource(uri, "v4l2", device, "v4l2", True)
    if uri.startswith(LIVE_SCHEMES):
        return VideoSource(uri, "stream", uri, "any", True)
    if uri.startswith("gst://") or " ! " in uri:
        pipeline = uri[len("gst://"):] if uri.startswith("gst://") else uri
        return VideoSource(uri, "gstreamer", pipeline, "gstreamer", "filesrc" not in pipeline)
    path = Path(uri[len("file://"):] if uri.startswith("file://") else uri)
    if not path.is_file():
        raise SourceError(f"{uri} does not exist" if not path.exists() else f"{uri} is not a file")
    if path.suffix.lower() not in VIDEO_SUFFIXES:
        raise SourceError(f"{uri}: not a video file ({', '.join(VIDEO_SUFFIXES)}); images go to mlit-edge predict")
    return VideoSource(uri, "file", str(path), "any", False)


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
    image: np.ndarray  # uint8 (H, W, 3), RGB
    read_at: float  # time.perf_counter() when it was decoded, for latency


class FrameReader:
    """The frames of one source, as the module docstring says; `dropped`, `corrupt` and `reconnects` count
    what did not reach the caller. Use as a context manager; `stop()` ends the iteration early."""

    def __init__(self, source: VideoSource, open_timeout_s: float = 10.0) -> None:
        self.source, self.cv2 = source, import_cv2()
        self.open_timeout_s = open_timeout_s
        self.dropped = self.corrupt = self.reconnects = self.read = 0
        self.truncated = self.stalled_at_close = False
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

    # -- reading ---------------------------------------------------------------------------------------

    def _rgb(self, bgr: np.ndarray) -> np.ndarray:
        return self.cv2.cvtColor(bgr, self.cv2.COLOR_BGR2RGB) if bgr.ndim == 3 else np.repeat(bgr[:, :, None], 3, 2)

    def _file_frames(self) -> Iterator[Frame]:
        cap, bad, index, total = self._cap, 0, 0, self.frame_count
        pending = self._first
        while not self._stop.is_set():
            if pending is not None:
                ok, bgr, pending = True, pending, None
            else:
                ok, bgr = cap.read()
            if ok:
                bad = 0
                t = cap.get(self.cv2.CAP_PROP_POS_MSEC) / 1000.0
                self.read += 1
                yield Frame(index, t if t > 0 or index == 0 else index / self.fps, self._rgb(bgr), time.perf_counter())
                index += 1
                continue
            if total is not None and index < total and bad < MAX_BAD_READS:
                bad += 1  # a frame that does not decode: skip it and count it, unless nothing decodes after it
                self.corrupt += 1
                index += 1
                continue
            if bad:  # failures that run to the end: the file stops short of what its header promised
                self.truncated = True
                self.corrupt -= bad
                logger.warning(f"{self.source.uri}: nothing decodes after frame {index - bad - 1} of the {total} its "
                               "header lists: the file is truncated")
            return

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
            frame = Frame(index, now - start, self._rgb(bgr), now)
            index += 1
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
