"""Hostile round 4 (issue 47), the device surface, as CLI replays: `bench` beside a `tegrastats` that
misbehaves, and `stream` on videos whose frames do not decode. `cases(folder, good, checkpoint)` writes each
case's files into `folder`; tests/test_hostile.py replays them. The fakes here are shared with
tests/test_hostile_r4_device.py (signals and threads, which a CLI replay cannot do)."""
from __future__ import annotations

import json
import os
import stat
import sys
from pathlib import Path

import numpy as np

from tests.hostile_corpus import Case

NANO = "RAM 2257/3964MB CPU [10%@729] POM_5V_IN 4520/4520 POM_5V_GPU 0/0 POM_5V_CPU 553/553"

# a helper forked by tegrastats that ignores SIGTERM: it outlived the bench when only tegrastats was ended
FORKS = """
child = os.fork()
if child == 0:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    open(os.path.join(os.path.dirname(sys.argv[0]), 'pids'), 'a').write(f'{os.getpid()}\\n')
    while True:
        time.sleep(1)
"""
LINES = """
while True:
    print(LINE, flush=True)
    time.sleep(interval)
"""


def fake_tegrastats(folder: Path, body: str) -> Path:
    """A `tegrastats` in `folder`: a Python script running `body` (with `os`, `signal`, `sys`, `time`,
    `interval` in seconds and `LINE`, a Nano's line), which first adds its pid to `folder/pids`."""
    folder.mkdir(parents=True, exist_ok=True)
    exe = folder / "tegrastats"
    exe.write_text(f"#!{sys.executable}\nimport os, signal, sys, time\n"
                   f"interval = int(sys.argv[sys.argv.index('--interval') + 1]) / 1000\nLINE = {NANO!r}\n"
                   f"open({str(folder / 'pids')!r}, 'a').write(f'{{os.getpid()}}\\n')\n{body}")
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    return folder


def pids(folder: Path) -> list[int]:
    f = folder / "pids"
    return [int(p) for p in f.read_text().split()] if f.exists() else []


def alive(pid: int) -> bool:
    """Whether `pid` runs (a zombie, dead but not yet reaped by whoever adopted it, does not)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


def corrupt_avi(path: Path, n: int, bad: set[int]) -> Path:
    """An MJPG AVI of `n` 64x48 frames (OpenCV's writer), the JPEG data of the frames in `bad` zeroed after
    their SOI marker: each is a frame that does not decode, between frames that do."""
    from mlit_edge.runtime.video import import_cv2

    cv2 = import_cv2()  # with FFmpeg's own lines silenced, as stream has them
    writer = cv2.VideoWriter(str(path), cv2.VideoWriter_fourcc(*"MJPG"), 10, (64, 48))
    for i in range(n):
        writer.write(np.full((48, 64, 3), (i * 37) % 256, np.uint8))
    writer.release()
    data = bytearray(path.read_bytes())
    starts = [i for i in range(len(data) - 2) if data[i:i + 3] == b"\xff\xd8\xff"]  # each frame's JPEG
    ends = starts[1:] + [data.rindex(b"idx1")]
    for k in bad:
        data[starts[k] + 2:ends[k] - 8] = bytes(ends[k] - 8 - starts[k] - 2)
    path.write_bytes(bytes(data))
    return path


def _results(path: Path, failed: list[int], classified: int):
    """A check: `path` holds an error record for each frame in `failed`, in its place, and `classified` rows."""
    def check() -> str | None:
        rows = [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []
        errors = [r["frame"] for r in rows if "error" in r]
        good = [r["frame"] for r in rows if "class" in r]
        if errors != failed or len(good) != classified or [r["frame"] for r in rows] != sorted(errors + good):
            return f"error records for frames {errors} (expected {failed}), {len(good)} classified"
        return None
    return check


def _bench(report: Path, bin_folder: Path, want: str, power: bool):
    """A check: no process of the fake tegrastats runs, and the report's notes have `want` (and power figures,
    or none)."""
    def check() -> str | None:
        living = [p for p in pids(bin_folder) if alive(p)]
        if living:
            return f"tegrastats processes still running: {living}"
        if not report.exists():
            return "no report"
        entry = json.loads(report.read_text())["artifacts"][0]
        notes = " / ".join(entry["notes"])
        has_power = any("power" in s for s in entry["latency"].values())
        if want not in notes or has_power != power:
            return f"notes {notes!r} (want {want!r}); power figures: {has_power}"
        return None
    return check


def cases(folder: Path, good: Path, checkpoint: Path) -> list[Case]:
    """The device surface's cases, their files written into `folder`."""
    folder.mkdir(parents=True, exist_ok=True)
    out: list[Case] = []
    model = ["--model", str(good)]
    bench = ["bench", str(good), "--batch", "1", "--duration", "1", "--warmup-ms", "0", "--warmup-iters", "1",
             "--limit", "8", "--json"]

    hostile = fake_tegrastats(folder / "hostile-bin", FORKS + """
sys.stdout.buffer.write(b'\\xff\\xfe\\xc3( ' + LINE.encode() + b' \\xed\\xa0\\x80\\n')
for _ in range(20):
    sys.stdout.buffer.write(b'VDD_IN 9/9 ' * 95325)  # a 20 MB line
sys.stdout.buffer.write(b'\\n')
""" + LINES)
    report = folder / "hostile.json"
    out.append(Case("tegrastats forks a child that ignores SIGTERM, prints non-UTF-8 and a 20 MB line", "device",
                    [*bench, str(report)], 0,
                    extra={"env": {"PATH": f"{hostile}{os.pathsep}{os.environ['PATH']}"},
                           "check": _bench(report, hostile, "1 line(s) longer than 16 KiB: dropped unread", True)}))
    stops = fake_tegrastats(folder / "stops-bin", FORKS + "for _ in range(3):\n    print(LINE, flush=True)\n")
    report = folder / "stops.json"
    out.append(Case("tegrastats stops before the timed calls", "device", [*bench, str(report)], 0,
                    extra={"env": {"PATH": f"{stops}{os.pathsep}{os.environ['PATH']}"},
                           "check": _bench(report, stops, "its output ended before these timed calls", False)}))

    video = corrupt_avi(folder / "corrupt.avi", 30, {4, 5, 19})
    results = folder / "corrupt.jsonl"
    out.append(Case("stream: frames 4, 5 and 19 do not decode", "device",
                    ["stream", str(video), *model, "--batch", "8", "--results", str(results)], 0,
                    extra={"check": _results(results, [4, 5, 19], 27)}))
    video = corrupt_avi(folder / "tail.avi", 30, set(range(25, 30)))
    results = folder / "tail.jsonl"
    out.append(Case("stream: the last 5 frames do not decode", "device",
                    ["stream", str(video), *model, "--results", str(results)], 0,
                    extra={"check": _results(results, [25, 26, 27, 28, 29], 25)}))
    video = corrupt_avi(folder / "every.avi", 30, {3, 4, 10})
    results = folder / "every.jsonl"
    out.append(Case("stream --every 2: a failed frame that would be classified gets its record", "device",
                    ["stream", str(video), *model, "--every", "2", "--results", str(results)], 0,
                    extra={"check": _results(results, [4, 10], 13)}))
    return out
