"""Hostile round 4 (issue 47), the device surface: a `tegrastats` that misbehaves (forks children that ignore
SIGTERM, prints bytes that are not UTF-8, a line that never ends, stops mid-window), `bench` ended by SIGTERM
or SIGKILL (no `mlit-bench-*` folder stays), and `stream` on a video with undecodable frames or at a large
batch (which frames failed; decoded frames in flight bounded). Not CLI replays: processes, signals, threads."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
import tracemalloc
from pathlib import Path

import numpy as np
import pytest

from mlit_edge.bench import power
from mlit_edge.bench.isolation import LOCK, PREFIX, sweep
from mlit_edge.bench.tegrastats import LINE_MAX
from tests.helpers import CLI
from tests.hostile_r4_device import FORKS, LINES, NANO, alive, fake_tegrastats, pids



def wait_for(condition, what: str, limit_s: float = 60.0) -> None:
    """Wait for a state (never a timing): `limit_s` only keeps a broken run from hanging the suite."""
    deadline = time.monotonic() + limit_s
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"never happened: {what}")
        time.sleep(0.02)


@pytest.fixture
def on_path(tmp_path, monkeypatch):
    def put(body: str) -> Path:
        folder = fake_tegrastats(tmp_path / "bin", body)
        monkeypatch.setenv("PATH", f"{folder}{os.pathsep}{os.environ['PATH']}")
        return folder
    return put


def test_tegrastats_and_what_it_forked_end_with_the_sampler(on_path):
    folder = on_path(FORKS + LINES)
    sampler = power.PowerSampler.start(interval_ms=20, baseline_s=0.05)
    wait_for(lambda: len(pids(folder)) == 2 and sampler.samples, "tegrastats and its child started and printing")
    assert all(alive(p) for p in pids(folder))
    assert sampler.stop() == []
    assert [p for p in pids(folder) if alive(p)] == []  # its child ignored SIGTERM: the group's SIGKILL ended it


def test_bytes_that_are_not_utf8_cost_nothing_but_themselves(on_path, monkeypatch):
    crashes = []
    monkeypatch.setattr(threading, "excepthook", lambda args: crashes.append(args.exc_value))
    on_path("""
while True:
    sys.stdout.buffer.write(b'\\xff\\xfe\\xc3( RAM 1/2MB ' + LINE.encode() + b' \\xed\\xa0\\x80\\n')
    sys.stdout.buffer.flush()
    time.sleep(interval)
""")
    sampler = power.PowerSampler.start(interval_ms=20, baseline_s=0.05)
    wait_for(lambda: len(sampler.samples) >= 3, "three readings parsed")
    sampler.stop()
    assert crashes == [] and sampler.error is None
    assert sampler.samples[-1][1:3] == ("POM_5V_IN", 4520.0)


def test_a_line_that_never_ends_is_dropped_with_the_memory_bounded(on_path):
    """50 MB without a newline, then good lines: the reader holds at most LINE_MAX + 1 bytes of it at once (its
    pieces' largest, and tracemalloc's peak of everything this process allocated meanwhile)."""
    on_path("""
for _ in range(50):
    sys.stdout.buffer.write(b'VDD_IN 9/9 ' * 95325)  # 50 x 1 MB, no newline
sys.stdout.buffer.write(b'\\n')
while True:
    print(LINE, flush=True)
    time.sleep(interval)
""")
    tracemalloc.start()
    try:
        sampler = power.PowerSampler.start(interval_ms=20, baseline_s=0.05)
        wait_for(lambda: sampler.child.lines.dropped == 1 and sampler.samples, "the long line read past")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    notes = sampler.stop()
    assert sampler.child.lines.largest == LINE_MAX + 1
    assert peak < 8 * 2 ** 20, f"{peak / 2 ** 20:.1f} MB allocated while reading a 50 MB line"
    assert all(r[2] == 4520.0 for r in sampler.samples)  # nothing of the dropped line became a reading
    assert notes == ["tegrastats printed 1 line(s) longer than 16 KiB: dropped unread"]


def test_a_tegrastats_that_stops_mid_window_says_what_it_covers():
    """Readings over the first 0.3 s of a 1 s window, then its output ended: the figure says it covers 40%."""
    sampler = power.PowerSampler(["unused"], interval_ms=100)
    for t in (0.0, 0.1, 0.2, 0.3):
        sampler._reading(NANO, t)
    sampler.child.closed_at = 0.35
    figures, note = sampler.window(end=1.0, wall_s=1.0, images=10)
    assert figures["coverage"] == pytest.approx(0.4) and figures["board_w"] == pytest.approx(4.52)
    assert note == ("tegrastats readings cover 40% of the 1.00 s of timed calls (its output ended 0.35 s into them): "
                    "its power figures (*) are from that part only")
    stats = {"wall_s": 1.0, "iterations": 10}
    assert sampler.add_to(stats, 1.0, 1) == [f"batch 1: {note}"]
    cells = power.cells(power.row_fields(stats))
    assert cells == ["4.52*", "0.00*", "452.000*", "-"]  # no idle reading: no net figure
    report = {"artifacts": [{"latency": {"1": stats}}]}
    assert power.footnote(report).endswith("; * from readings that cover only part of the timed calls (see the notes)")
    steady = power.PowerSampler(["unused"], interval_ms=100)
    for t in np.arange(0.0, 1.0, 0.1):
        steady._reading(NANO, float(t))
    figures, note = steady.window(end=1.0, wall_s=1.0, images=10)
    assert figures["coverage"] == 1.0 and note is None


def test_a_tegrastats_that_stopped_before_the_window_says_so():
    sampler = power.PowerSampler(["unused"], interval_ms=100)
    sampler._reading(NANO, 0.0)
    sampler.child.closed_at = 0.05
    assert sampler.window(end=2.0, wall_s=1.0, images=10) == (
        None, "0 tegrastats reading(s) in 1.00 s of timed calls: power not measured (its output ended before "
              "these timed calls)")


def test_a_tegrastats_that_exits_while_its_child_holds_the_pipe_has_ended(on_path):
    """Its output never reaches its end (a forked child keeps the pipe open): its exit, seen without reaping it,
    ends it at its last line, so the window after says why it has no readings."""
    folder = on_path(FORKS + "for _ in range(3):\n    print(LINE, flush=True)\n")
    sampler = power.PowerSampler.start(interval_ms=20, baseline_s=0.05)
    wait_for(lambda: sampler.child.ended_at is not None, "tegrastats seen to have exited")
    assert sampler.child.closed_at is None and sampler.child.ended_at == sampler.child.last_at
    figures, why = sampler.window(sampler.child.last_at + 1.0, 0.5, 10)  # timed calls after its last line
    assert figures is None and why.endswith("power not measured (its output ended before these timed calls)")
    sampler.stop()
    assert [p for p in pids(folder) if alive(p)] == []


def test_a_flood_of_readings_is_kept_within_its_budget():
    sampler = power.PowerSampler(["unused"], interval_ms=100)
    n = power.READINGS_BYTES // power.READING_BYTES + 1000
    for i in range(n):
        sampler._reading(NANO, i * 1e-6)
    assert sampler._held <= power.READINGS_BYTES and sampler.forgotten >= 1000
    assert "oldest dropped" in sampler.stop()[0]


def test_rails_are_ascii_numbers_and_finite():
    assert power.parse_rails("VDD_IN ٣٣/٣٣ VDD_GPU " + "9" * 400 + "/1 POM_5V_CPU 5/5") == {"POM_5V_CPU": 5.0}


# -- bench ended by a signal: its mlit-bench-* folder, and tegrastats with it ----------------------------------


def test_bench_ended_by_sigterm_leaves_no_folder_and_no_tegrastats(tmp_path, on_path, tiny_onnx):
    folder = on_path(FORKS + LINES)
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    proc = subprocess.Popen([*CLI, "bench", str(tiny_onnx), "--batch", "1", "--duration", "600", "--warmup-iters",
                             "1", "--warmup-ms", "0"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        wait_for(lambda: list(tmp_path.glob(PREFIX + "*")) and len(pids(folder)) == 2 or proc.poll() is not None,
                 "the bench's folder and its tegrastats", 120)
        assert proc.poll() is None, proc.stderr.read().decode()
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    lines = err.decode().strip().splitlines()
    assert proc.returncode == 143 and lines[-1] == "terminated", err.decode()
    assert "Traceback" not in err.decode()
    assert list(tmp_path.glob(PREFIX + "*")) == []
    assert [p for p in pids(folder) if alive(p)] == []


def test_a_folder_a_killed_bench_left_is_removed_by_the_next(tmp_path):
    """SIGKILL runs no handler: the folder stays, unlocked, and the next bench's sweep removes it; a running
    bench's folder (its lock held) is kept."""
    code = ("import sys, time\nfrom mlit_edge.bench.isolation import scratch_folder\n"
            "with scratch_folder() as f:\n    print(f, flush=True)\n    time.sleep(600)\n")
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    procs = [subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE) for _ in range(2)]
    try:
        killed, running = (Path(p.stdout.readline().decode().strip()) for p in procs)
        procs[0].kill()
        procs[0].wait()
        assert (killed / LOCK).exists()
        (tmp_path / (PREFIX + "making")).mkdir()  # no .lock yet: one being made now
        assert sweep(tmp_path) == [killed]
        assert not killed.exists() and (running / LOCK).exists() and (tmp_path / (PREFIX + "making")).exists()
    finally:
        for p in procs:
            p.kill()
            p.wait()


# -- stream: decoded frames in flight ---------------------------------------------------------------------------


def test_a_large_batch_holds_model_size_frames_not_full_ones(tiny_onnx, tmp_path):
    """40 frames of 1080p at --batch 32 and at --batch 2: the peak of what numpy and OpenCV allocated (tracemalloc)
    differs by far less than one full frame per batch slot (6.2 MB each: 190 MB when full frames waited)."""
    import io

    from mlit_edge.runtime.stream import StreamOptions, run_stream
    from mlit_edge.runtime.video import import_cv2

    cv2 = import_cv2()
    video = tmp_path / "hd.avi"
    writer = cv2.VideoWriter(str(video), cv2.VideoWriter_fourcc(*"MJPG"), 30, (1920, 1080))
    for i in range(40):
        writer.write(np.full((1080, 1920, 3), i * 5, np.uint8))
    writer.release()
    peaks = {}
    for batch in (2, 32):
        out = io.StringIO()
        tracemalloc.start()
        try:
            summary = run_stream(tiny_onnx, str(video), StreamOptions(batch=batch, status_s=0), out)
            peaks[batch] = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert summary["classified"] == 40 and len(out.getvalue().splitlines()) == 40
    frame = 1920 * 1080 * 3
    assert peaks[32] - peaks[2] < 4 * frame, {b: f"{p / 2 ** 20:.0f} MB" for b, p in peaks.items()}


def test_sigterm_wrapped_by_the_exporter_is_still_sigterm():
    """The dynamo exporter wraps what interrupts it in its own error; SIGTERM must unwind as itself (exit 143)."""
    from mlit_edge.export.onnx_export import raise_if_interrupted
    from mlit_edge.base.terminate import Terminated

    wrapped = RuntimeError("Failed to export the model")
    wrapped.__cause__ = Terminated("terminated (signal 15)")
    with pytest.raises(Terminated):
        raise_if_interrupted(wrapped)


def test_a_stream_writes_to_the_stdout_of_the_call(tiny_onnx, tmp_path):
    """`run_stream` without `out` writes to `sys.stdout` as it is when called: a default bound at import time kept
    the first stdout, so a caller (or a test) that redirected it later got nothing."""
    import contextlib
    import io

    from mlit_edge.runtime.stream import StreamOptions, run_stream
    from mlit_edge.runtime.video import import_cv2

    cv2 = import_cv2()
    video = tmp_path / "v.avi"
    writer = cv2.VideoWriter(str(video), cv2.VideoWriter_fourcc(*"MJPG"), 30, (64, 48))
    for i in range(3):
        writer.write(np.full((48, 64, 3), i * 40, np.uint8))
    writer.release()
    for _ in range(2):  # the second call too: a redirect made after the first is honoured
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            summary = run_stream(tiny_onnx, str(video), StreamOptions(status_s=0))
        assert summary["classified"] == 3 and len(out.getvalue().splitlines()) == 3, out.getvalue()
