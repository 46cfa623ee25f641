"""Frames per second of `mlit-edge stream` on a video file against `mlit-edge predict` on the same frames
saved as PNG files, side by side in one run, and what decoding and resizing cost per frame.

    python benchmarks/video_fps.py --model artifacts/mlit-xxs-fp32.onnx --frames 300 --size 640x480

The video is MJPG in AVI, written here from the embedded test digits scaled to --size (a camera's
frame, not a 36 px thumbnail, so decode and resize weigh what they weigh on a device). Each path runs
--rounds times, alternated; the median is reported.
"""
from __future__ import annotations

import argparse
import io
import statistics
import tempfile
import time
from pathlib import Path


def write_inputs(folder: Path, frames: int, width: int, height: int, cv2) -> tuple[Path, list[Path]]:
    from mlit_edge.train.data import mnist5k_raw

    digits = mnist5k_raw("test")[0]
    video = folder / "clip.avi"
    writer = cv2.VideoWriter(str(video), cv2.VideoWriter_fourcc(*"MJPG"), 30, (width, height))
    pngs = []
    for i in range(frames):
        bgr = cv2.cvtColor(cv2.resize(digits[i % len(digits)], (width, height)), cv2.COLOR_GRAY2BGR)
        writer.write(bgr)
        pngs.append(folder / f"frame{i:05d}.png")
        cv2.imwrite(str(pngs[-1]), bgr)
    writer.release()
    return video, pngs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", required=True, help="a .onnx or .plan artifact built by mlit-edge")
    ap.add_argument("--frames", type=int, default=300)
    ap.add_argument("--size", default="640x480", help="WIDTHxHEIGHT of the frames")
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    from mlit_edge.runtime import Classifier, predict_files
    from mlit_edge.runtime.stream import StreamOptions, run_stream
    from mlit_edge.runtime.video import FrameReader, import_cv2, parse_source

    cv2 = import_cv2()
    width, height = (int(v) for v in args.size.split("x"))
    with tempfile.TemporaryDirectory(prefix="video-fps-") as tmp:
        video, pngs = write_inputs(Path(tmp), args.frames, width, height, cv2)
        times: dict[str, list[float]] = {"stream (video file)": [], "predict (PNG files)": [], "decode only": [],
                                         "resize": []}
        with Classifier.load(args.model) as clf:
            for _ in range(args.rounds):
                start = time.perf_counter()
                run_stream(args.model, str(video), StreamOptions(status_s=0), io.StringIO())
                times["stream (video file)"].append(time.perf_counter() - start)
                start = time.perf_counter()
                results = predict_files(args.model, pngs)
                times["predict (PNG files)"].append(time.perf_counter() - start)
                assert not any("error" in r for r in results)
                start = time.perf_counter()
                with FrameReader(parse_source(str(video))) as reader:
                    frames = [f.image for f in reader]
                times["decode only"].append(time.perf_counter() - start)
                start = time.perf_counter()
                for image in frames:  # the decoded frames, one call each as stream makes them
                    clf.preprocess(image)
                times["resize"].append(time.perf_counter() - start)
        assert len(frames) == args.frames
    med = {k: statistics.median(v) for k, v in times.items()}
    print(f"{args.frames} frames of {width}x{height}, {Path(args.model).name}, median of {args.rounds} rounds")
    for k in ("stream (video file)", "predict (PNG files)"):
        print(f"  {k:<22} {args.frames / med[k]:8.1f} FPS  {1000 * med[k] / args.frames:7.2f} ms/frame")
    print(f"  stream / predict: {med['predict (PNG files)'] / med['stream (video file)']:.2f}x the frames per second")
    decode = 1000 * med["decode only"] / args.frames
    resize = 1000 * med["resize"] / args.frames
    print(f"  per frame: decode {decode:.2f} ms, resize and normalise {resize:.2f} ms (of the stream's "
          f"{1000 * med['stream (video file)'] / args.frames:.2f} ms)")


if __name__ == "__main__":
    main()
