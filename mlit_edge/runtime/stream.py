"""`mlit-edge stream`: classify the frames of a video file, a camera or a stream, as jetson-inference's
`imagenet.py SOURCE [OUTPUT]` does, with the torch-free runtime.

One JSON line per classified frame (its index, the source's timestamp, the class, its probability and the
latency from decoded frame to result), and for a file's frame that did not decode, one with its `error`
instead; an optional annotated video (class, probability and FPS drawn on every frame), and a status line
on stderr at an interval, which names the first frames that failed. A frame waiting for its batch is kept
at the model's input size only (resized as it is decoded, by the classifier's own resize), so `--batch 240`
on 1080p holds 240 small images and one full-size frame, not 240 full ones. SIGINT and SIGTERM end the run between
frames: every JSON line written is whole and the annotated video is finalised, so it plays.
"""
from __future__ import annotations

import json
import logging
import re
import signal
import sys
import threading
import time
from collections import deque
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Iterator

import numpy as np

from .classifier import Classifier, Prediction
from ..artifacts.clobber import check_file_folder, refuse_clobber
from ..artifacts.preprocess import resize_images
from ..artifacts.sidecar import pending_path, sidecar_path
from .video import Frame, FrameReader, SourceError, VideoSource, import_cv2, parse_source
from .stream_options import FOURCC, StreamOptions

logger = logging.getLogger(__name__)


class Stats:
    """Frames, drops and latencies of a run, for the status line and the summary."""

    def __init__(self) -> None:
        self.start = time.perf_counter()
        self.classified = 0
        self.latencies_ms: list[float] = []
        self._recent: deque[float] = deque(maxlen=30)  # result times of the last classified frames, for the FPS

    def add(self, latency_ms: float) -> None:
        self.classified += 1
        self.latencies_ms.append(latency_ms)
        self._recent.append(time.perf_counter())

    @property
    def fps(self) -> float:
        """Classified frames per second over the last 30 (the figure drawn on the video)."""
        r = self._recent
        return (len(r) - 1) / (r[-1] - r[0]) if len(r) > 1 and r[-1] > r[0] else 0.0

    def summary(self, reader: FrameReader) -> dict:
        lat = np.array(self.latencies_ms or [np.nan])
        seconds = time.perf_counter() - self.start
        return {"frames_read": reader.read, "classified": self.classified, "dropped": reader.dropped,
                "corrupt": reader.corrupt, "corrupt_frames": list(reader.failed), "reconnects": reader.reconnects,
                "truncated": reader.truncated, "cut_after": reader.cut_after,
                "fps": self.classified / seconds if seconds > 0 else 0.0,
                "latency_ms_p50": float(np.nanpercentile(lat, 50)) if self.latencies_ms else None,
                "latency_ms_p99": float(np.nanpercentile(lat, 99)) if self.latencies_ms else None,
                "seconds": seconds}


def status_line(s: dict, live: bool) -> str:
    p50 = "-" if s["latency_ms_p50"] is None else f"{s['latency_ms_p50']:.1f}"
    p99 = "-" if s["latency_ms_p99"] is None else f"{s['latency_ms_p99']:.1f}"
    corrupt = f"corrupt {s['corrupt']}"
    if s["corrupt_frames"]:  # a file's: which ones, the first few
        more = ", ..." if s["corrupt"] > len(s["corrupt_frames"]) else ""
        corrupt += f" (frame{'s' if s['corrupt'] > 1 else ''} {', '.join(map(str, s['corrupt_frames']))}{more})"
    skipped = (f"dropped {s['dropped']} (live: newest frame only)" + (f" | {corrupt}" if s["corrupt"] else "")
               if live else corrupt)
    return (f"frames {s['frames_read']} | classified {s['classified']} | {s['fps']:.1f} FPS | latency p50 {p50} ms "
            f"p99 {p99} ms | {skipped}" + (f" | reconnects {s['reconnects']}" if s["reconnects"] else "")
            + (f" | nothing decodes after frame {s['cut_after']}" if s["truncated"] else ""))


class Annotator:
    """The annotated video: each frame with the latest class, its probability and the FPS drawn on it."""

    def __init__(self, path: str, fps: float) -> None:
        self.cv2, self.path, self.fps, self.writer = import_cv2(), path, fps, None
        self.size = (0, 0)  # the writer's (width, height), set by the first frame

    def write(self, frame: Frame, label: str) -> None:
        cv2 = self.cv2
        bgr = cv2.cvtColor(frame.image, cv2.COLOR_RGB2BGR)
        if self.writer is not None and bgr.shape[:2] != self.size[::-1]:  # an MJPEG part of another size
            bgr = cv2.resize(bgr, self.size, interpolation=cv2.INTER_AREA)
        h, w = bgr.shape[:2]
        if self.writer is None:
            self.size = (w, h)
            fourcc = cv2.VideoWriter_fourcc(*FOURCC[Path(self.path).suffix.lower()])
            self.writer = cv2.VideoWriter(self.path, fourcc, self.fps, (w, h))
            if not self.writer.isOpened():
                raise SourceError(f"{self.path}: this OpenCV cannot write that format; try .avi (MJPG)")
        font = cv2.FONT_HERSHEY_SIMPLEX
        (text_w, text_h), _ = cv2.getTextSize(label, font, 1.0, 1)
        scale = min(max(w, 320) / 640, 0.94 * w / text_w)  # readable on a thumbnail, never wider than the frame
        thick = max(1, round(2 * scale))
        pad = max(2, int(text_h * scale * 0.4))
        cv2.rectangle(bgr, (0, 0), (w, int(text_h * scale) + 2 * pad), (0, 0, 0), -1)
        cv2.putText(bgr, label, (pad, int(text_h * scale) + pad), font, scale, (255, 255, 255), thick, cv2.LINE_AA)
        self.writer.write(bgr)

    def close(self) -> None:
        if self.writer is not None:
            self.writer.release()  # writes the container's index: the file plays
            self.writer = None


@contextmanager
def stop_on_signals(reader: FrameReader) -> Iterator[dict]:
    """SIGINT and SIGTERM stop the reader between frames (recorded in the yielded dict), instead of
    killing the process mid-write; the previous handlers come back afterwards."""
    got: dict = {}
    if threading.current_thread() is not threading.main_thread():
        yield got
        return

    def handler(signum, _frame):
        got["signal"] = signum
        reader.stop()

    old = {s: signal.signal(s, handler) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield got
    finally:
        for s, h in old.items():
            signal.signal(s, h)


def _label(p: Prediction | None, fps: float) -> str:
    return "..." if p is None else f"{p.name} {p.prob:.2f} | {fps:.1f} FPS"


def source_file(source: VideoSource) -> str | None:
    """The file a source reads, where it reads one: a video file, or a GStreamer pipeline's `filesrc`."""
    if source.kind == "file":
        return str(source.target)
    if source.kind != "gstreamer":
        return None
    found = re.search(r"filesrc\s+location=(\"[^\"]*\"|'[^']*'|\S+)", str(source.target))
    return found.group(1).strip("\"'") if found else None


def check_paths(model: str | Path, source: VideoSource, opts: StreamOptions) -> None:
    """Refuse, in one line and before anything is opened for writing, an OUTPUT or --results that is the
    source, the model or its sidecar, or the other one (`artifacts.clobber`), or whose folder cannot be written."""
    writes = {"the annotated video": opts.output, "--results": opts.results}
    reads = {"the source video": source_file(source), "the model": model,
             "the model's sidecar": sidecar_path(model), "the model's pending sidecar": pending_path(model)}
    refuse_clobber(writes, reads)
    for what, path in writes.items():
        if path is not None:
            check_file_folder(path, what)


def run_stream(model: str | Path, uri: str, opts: StreamOptions, out: IO[str] | None = None) -> dict:
    """Classify `uri`'s frames with the artifact `model`; JSON lines to `out` (None: the `sys.stdout` of the
    call, not of the import, so a caller that redirects stdout gets them), or appended to `opts.results`.
    Returns the summary, with `signal` set when SIGINT or SIGTERM ended it, and `stalled_at_close` when a live
    source's read was still blocked as it closed (its thread and capture live on until that read returns)."""
    source = parse_source(uri, *opts.camera)
    check_paths(model, source, opts)
    if opts.results is None:
        return _run(model, source, opts, out or sys.stdout)
    with open(opts.results, "a") as results:
        return _run(model, source, opts, results)


def _run(model: str | Path, source: VideoSource, opts: StreamOptions, out: IO[str]) -> dict:
    uri = source.uri
    with Classifier.load(model, max_pixels=opts.max_pixels) as clf, \
            FrameReader(source, max_pixels=opts.max_pixels, failures=True) as reader, stop_on_signals(reader) as got:
        batch = opts.batch or clf.runner.static_batch or 1
        annotator = Annotator(opts.output, reader.fps) if opts.output else None
        stats, last, last_status = Stats(), None, time.perf_counter()
        pending: list[Frame] = []  # in order: frames to classify (their image at the model's size) and failed ones
        waiting = 0  # of them, frames to classify
        logger.info(f"{uri}: {source.kind} source, {'live: the newest frame is classified, older ones dropped' if source.live else 'file: every frame read'}"
                    f" ({reader.fps:g} FPS), classifying 1 in {opts.every} with {Path(model).name}, batch {batch}")

        def flush() -> None:
            nonlocal last, waiting
            images = [f.image for f in pending if f.error is None]
            preds = iter(clf.predict(images, top_k=opts.top_k) if images else [])
            done = time.perf_counter()
            for f in pending:
                if f.error is not None:
                    out.write(json.dumps({"frame": f.index, "t": round(f.timestamp_s, 4), "error": f.error}) + "\n")
                    continue
                p = next(preds)
                latency = (done - f.read_at) * 1000
                stats.add(latency)
                row = {"frame": f.index, "t": round(f.timestamp_s, 4), "class": p.name, "class_id": p.class_id,
                       "prob": round(p.prob, 6), "latency_ms": round(latency, 3)}
                if opts.top_k > 1:
                    row["top"] = [[c, n, round(q, 6)] for c, n, q in p.top]
                out.write(json.dumps(row) + "\n")
                last = p
            out.flush()
            pending.clear()
            waiting = 0

        try:
            for frame in reader:
                if frame.index % opts.every == 0:  # the full-size frame is not kept: the annotator has it now
                    small = None if frame.error else resize_images([frame.image], clf.size)[0]
                    pending.append(Frame(frame.index, frame.timestamp_s, small, frame.read_at, frame.error))
                    waiting += frame.error is None
                    if waiting >= batch or source.live or not waiting:  # a failure alone: written now
                        flush()
                if annotator is not None and frame.error is None:
                    annotator.write(frame, _label(last, stats.fps))
                now = time.perf_counter()
                if opts.status_s and now - last_status >= opts.status_s:
                    logger.info(status_line(stats.summary(reader), source.live))
                    last_status = now
                if opts.max_frames is not None and stats.classified + waiting >= opts.max_frames:
                    break
            if pending:
                flush()
        finally:
            if annotator is not None:
                annotator.close()
        summary = stats.summary(reader)
        logger.info(status_line(summary, source.live))
    # after close(): whether a live read was still blocked then (the CLI then exits without finalising)
    return {**summary, "source": source.kind, "live": source.live, "stalled_at_close": reader.stalled_at_close, **got}
