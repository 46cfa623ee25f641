"""What `mlit-edge stream` is asked for (`StreamOptions`), apart from the stream itself (`runtime.stream`), so that
the CLI takes its options' defaults from here without loading the video stack (OpenCV's wrappers, HTTP) on a
device's every command."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from .images import DEFAULT_MAX_PIXELS

MAX_SIDE, MAX_FPS = 16384, 1000  # [ours] past any CSI sensor's mode; FrameReader trusts no stated FPS over 1000
FOURCC = {".avi": "MJPG", ".mp4": "mp4v", ".m4v": "mp4v", ".mov": "mp4v", ".mkv": "MJPG"}


@dataclass(frozen=True)
class StreamOptions:
    """What `mlit-edge stream` was asked to do; `run_stream` takes it."""

    every: int = 1  # classify one frame in N
    batch: int | None = None  # frames per call [default: a static-batch engine's batch, else 1]
    top_k: int = 1
    output: str | None = None  # the annotated video
    results: str | None = None  # a file to append the JSON lines to, instead of `out`
    status_s: float = 2.0  # seconds between status lines (0: none)
    max_frames: int | None = None  # stop after this many classified frames
    camera: tuple[int, int, int] = (1280, 720, 30)  # a CSI camera's width, height and fps
    max_pixels: int | None = DEFAULT_MAX_PIXELS  # a larger frame is skipped and counted as corrupt

    def __post_init__(self) -> None:
        if self.every < 1 or (self.batch is not None and self.batch < 1) or self.top_k < 1:
            raise ValueError("--every, --batch and --top-k must be at least 1")
        if not self.status_s >= 0:  # NaN too
            raise ValueError(f"--status-every {self.status_s}: give seconds >= 0")
        width, height, fps = self.camera
        if not (1 <= width <= MAX_SIDE and 1 <= height <= MAX_SIDE and 1 <= fps <= MAX_FPS):
            raise ValueError(f"--camera {width}x{height}@{fps}: give a width and height from 1 to {MAX_SIDE} and "
                             f"an FPS from 1 to {MAX_FPS}")
        if self.output is not None and Path(self.output).suffix.lower() not in FOURCC:
            raise ValueError(f"{self.output}: write the annotated video as one of {', '.join(FOURCC)}")
