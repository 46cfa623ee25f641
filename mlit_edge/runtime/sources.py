"""The video sources a user names (`csi://0`, `/dev/video0`, `rtsp://...`, a pipeline, a file) and what
`cv2.VideoCapture` opens for each: no OpenCV here, so names are checked before anything is imported."""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from .images import InputError
from ..base.messages import not_a_file

VIDEO_SUFFIXES = (".mp4", ".mkv", ".avi", ".mov", ".webm", ".m4v", ".mpg", ".mpeg", ".ts", ".wmv", ".flv")
LIVE_SCHEMES = ("rtsp://", "rtsps://", "rtmp://", "http://", "https://")


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
    (`gst://...` or any text with ` ! ` that is not the path of a file), or a video file (`file://...` or a path). `width`, `height`
    and `fps` are the CSI camera's mode. Raises SourceError for what is none of these."""
    if uri.startswith("csi://"):
        sensor = uri[len("csi://"):]
        if not re.fullmatch(r"[0-9]{1,3}", sensor):  # ASCII: str.isdigit() takes '²', which int() refuses
            raise SourceError(f"{uri}: a CSI camera is csi://N, N the sensor id (csi://0)")
        return VideoSource(uri, "csi", csi_pipeline(int(sensor), width, height, fps), "gstreamer", True)
    if uri.startswith("v4l2://") or re.fullmatch(r"/dev/video\d+", uri):
        device = uri[len("v4l2://"):] if uri.startswith("v4l2://") else uri
        if not re.fullmatch(r"/dev/video\d+", device):
            raise SourceError(f"{uri}: a V4L2 camera is /dev/videoN or v4l2:///dev/videoN")
        return VideoSource(uri, "v4l2", device, "v4l2", True)
    if uri.startswith(LIVE_SCHEMES):
        return VideoSource(uri, "stream", uri, "any", True)
    if uri.startswith("gst://") or (" ! " in uri and not Path(uri).exists()):  # a file that exists is a file
        pipeline = uri[len("gst://"):] if uri.startswith("gst://") else uri
        return VideoSource(uri, "gstreamer", pipeline, "gstreamer", "filesrc" not in pipeline)
    path = Path(uri[len("file://"):] if uri.startswith("file://") else uri)
    kind = not_a_file(path)
    if kind:
        raise SourceError(f"{uri} {kind}")
    if path.suffix.lower() not in VIDEO_SUFFIXES:
        raise SourceError(f"{uri}: not a video file ({', '.join(VIDEO_SUFFIXES)}); images go to mlit-edge predict")
    return VideoSource(uri, "file", str(path), "any", False)
