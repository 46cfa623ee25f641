"""Power and energy per inference on a Jetson, from `tegrastats` sampled while the timed calls run.

`tegrastats --interval MS` prints one line per interval; each power rail reads `NAME CUR/AVG` (milliwatts,
`mW` written after each number since JetPack 5), JetPack 7 adds a third number (`CUR/AVG/MAX`). Only the
current reading is used: the average is tegrastats' own since it started. The lines and where they came from
are in tests/data/tegrastats/README.md; what each field means is NVIDIA's tegrastats appendix (L4T 32.x) and
the power pages of the Jetson Linux developer guide (r35, r36).

Board power is the module's input rail where it has one (`VDD_IN` on Orin Nano/NX, Xavier NX and TX2,
`POM_5V_IN` on Nano): that rail is the total and the others are parts of it (NVIDIA's forum answer quoted
in rbonghi/jetson_stats#51). AGX Xavier and AGX Orin have no input rail; there the board figure is the sum
of the module's rails (the sum NVIDIA names for Xavier's total, jetson_stats#51; AGX Orin's
`VIN_SYS_5V0` is the I/O rail, jetson_stats#344), and the report says so. The GPU figure is the first rail
whose name has GPU in it: on Orin Nano/NX that rail (`VDD_CPU_GPU_CV`) also feeds the CPU and the CV
engines, and its name is reported beside the number.

Energy per image = mean board power (W) x wall time of the timed calls (s) / images timed x 1000, in mJ.
It includes what the board draws when idle; the idle figure (the mean over a short window before the first
batch, the artifact loaded and nothing running) is reported too, and the net energy subtracts it:
(mean - idle) x wall time / images x 1000. Off a Jetson (no `tegrastats` on PATH) nothing is sampled and no
power field appears: absent, not zero. Readings that cover less than `COVERED` of the timed calls (a
tegrastats that stopped, or went quiet) still give a figure, with its `coverage` in the JSON, a * in the
table and a note saying so. How tegrastats is run and read (bounded, its whole group ended) is
`bench.tegrastats`. Python 3.8 compatible: this runs on JetPack 5.
"""
from __future__ import annotations

import math
import re
import shutil
import threading
import time
from collections import deque
from typing import Deque, Dict, List, Optional, Tuple

from .tegrastats import LINE_MAX, Tegrastats

INTERVAL_MS = 100  # tegrastats' sampling interval: 20 readings in bench's default 2 s of timed calls
BASELINE_S = 0.5  # the idle window before the first batch
MIN_SAMPLES = 2  # fewer readings than this in a timed window: no power figure for it, and a note
INPUT_RAILS = ("VDD_IN", "POM_5V_IN")  # the board's input, where the module measures it
NOT_CONNECTED = ("NC",)  # AGX Orin prints unconnected INA3221 channels as "NC 0mW/0mW"
COVERED = 0.9  # [ours] readings covering less of the timed calls than this: the figure says so (a note, a *)
READINGS_BYTES = 8 << 20  # [ours] the most the kept readings hold, however fast a tegrastats prints
READING_BYTES = 200  # about what one kept reading costs besides its rail names (a tuple, floats, ints)

# NAME CUR[mW]/AVG[mW][/MAX[mW]], then a space or the end: "RAM 3162/7620MB" and "cpu@52.9C/52.9C" are not rails
RAIL = re.compile(r"(?:^|\s)([A-Za-z][A-Za-z0-9_]*) (\d+(?:\.\d+)?)(?:mW)?/\d+(?:\.\d+)?(?:mW)?"
                  r"(?:/\d+(?:\.\d+)?(?:mW)?)?(?=\s|$)", re.ASCII)  # ASCII digits: "٣" is no reading
MEMORY = ("RAM", "SWAP", "IRAM")  # X/Y without a unit only in the rare line whose MB was cut off


def parse_rails(line: str) -> Dict[str, float]:
    """Every power rail of one tegrastats line: name -> current reading in mW (empty when it has none)."""
    rails = {name: float(cur) for name, cur in RAIL.findall(line) if name not in MEMORY and name not in NOT_CONNECTED}
    return {name: mw for name, mw in rails.items() if math.isfinite(mw)}  # 400 digits read as inf


def board_rail(rails: Dict[str, float]) -> Tuple[str, float]:
    """The board's power in mW and what it is: the input rail's name, or the sum of the module's rails."""
    for name in INPUT_RAILS:
        if name in rails:
            return name, rails[name]
    return "sum of " + "+".join(sorted(rails)), sum(rails.values())


def gpu_rail(rails: Dict[str, float]) -> Optional[Tuple[str, float]]:
    """The first rail that feeds the GPU (its name says what else it feeds), or None."""
    for name in rails:
        if "GPU" in name.upper():
            return name, rails[name]
    return None


def _mean(values: List[float]) -> Optional[float]:
    return sum(values) / len(values) if values else None


def coverage(times: List[float], start: float, end: float, interval_s: float) -> float:
    """The part of [start, end] the readings at `times` stand for, each the span of one interval on either side
    of it (generous to jitter: a steady tegrastats covers all of it; one that stopped covers up to its last)."""
    covered, reach = 0.0, start
    for t in sorted(times):
        lo, hi = max(t - interval_s, reach, start), min(t + interval_s, end)
        if hi > lo:
            covered, reach = covered + hi - lo, hi
    return min(1.0, covered / (end - start)) if end > start else 1.0


Reading = Tuple[float, str, float, Optional[Tuple[str, float]], int]  # time, board rail, board mW, GPU rail, bytes


class PowerSampler:
    """`tegrastats` running beside the bench (`bench.tegrastats`), its readings stamped with
    `time.perf_counter` as they arrive and kept within `READINGS_BYTES` (the oldest go first).

    `start()` returns None where there is no tegrastats (not a Jetson); `window(end, wall_s, images)` is the
    power and energy of the timed calls that ended at `end` and took `wall_s`.
    """

    def __init__(self, command: List[str], interval_ms: int = INTERVAL_MS) -> None:
        self.interval_s = interval_ms / 1e3
        self.samples: Deque[Reading] = deque()
        self.idle_mw: Optional[float] = None
        self.forgotten = 0  # readings dropped, oldest first, to stay within READINGS_BYTES
        self._held = 0
        self._lock = threading.Lock()
        self.child = Tegrastats(command, self._reading)

    @property
    def error(self) -> Optional[str]:
        return self.child.error

    @classmethod
    def start(cls, interval_ms: int = INTERVAL_MS, baseline_s: float = BASELINE_S) -> Optional["PowerSampler"]:
        exe = shutil.which("tegrastats")
        if exe is None:
            return None
        sampler = cls([exe, "--interval", str(interval_ms)], interval_ms)
        sampler.child.start()
        sampler._baseline(baseline_s)
        return sampler

    def _reading(self, line: str, t: float) -> None:
        rails = parse_rails(line)
        if not rails:
            return
        board, mw = board_rail(rails)
        gpu = gpu_rail(rails)
        size = READING_BYTES + len(board) + (len(gpu[0]) if gpu else 0)
        with self._lock:
            self.samples.append((t, board, mw, gpu, size))
            self._held += size
            while self._held > READINGS_BYTES:
                self._held -= self.samples.popleft()[-1]
                self.forgotten += 1

    def _readings(self, start: float, end: float) -> List[Reading]:
        with self._lock:
            return [r for r in self.samples if start <= r[0] <= end]

    def _baseline(self, seconds: float) -> None:
        """The idle draw: the readings of `seconds` (at least MIN_SAMPLES intervals) before any timed call."""
        t0 = time.perf_counter()
        time.sleep(max(seconds, MIN_SAMPLES * self.interval_s))
        idle = [r[2] for r in self._readings(t0, time.perf_counter())]
        self.idle_mw = _mean(idle) if len(idle) >= MIN_SAMPLES else None

    def _ended_in(self, start: float, end: float) -> Optional[str]:
        """Where tegrastats' output ended, if before `end`: "before ..." or "X s into ..." the window."""
        ended = self.child.ended_at
        if ended is None or ended >= end:
            return None
        return "before these timed calls" if ended <= start else f"{ended - start:.2f} s into them"

    def window(self, end: float, wall_s: float, images: int) -> Tuple[Optional[dict], Optional[str]]:
        """Power and energy of the timed calls in [end - wall_s, end]: (figures, a note when the readings cover
        less than COVERED of it), or (None, why not)."""
        if self.error:
            return None, self.error
        if not self.samples:  # running, but no rail in its lines: the INA3221 needs root on some images
            ended = self._ended_in(-float("inf"), end)
            return None, ("tegrastats printed no power rails" + (" and stopped" if ended else "")
                          + " (on some JetPack images it needs root): power not measured")
        start = end - wall_s
        inside = self._readings(start, end)
        ended = self._ended_in(start, end)
        if len(inside) < MIN_SAMPLES:
            return None, (f"{len(inside)} tegrastats reading(s) in {wall_s:.2f} s of timed calls: power not measured"
                          + (f" (its output ended {ended})" if ended else " (time longer: --duration)"))
        covered = coverage([r[0] for r in inside], start, end, self.interval_s)
        gpus = [r[3] for r in inside if r[3] is not None]
        board_w = _mean([r[2] for r in inside]) / 1e3
        out = {"samples": len(inside), "board_rail": inside[-1][1], "board_w": board_w,
               "gpu_rail": gpus[-1][0] if gpus else None,
               "gpu_w": _mean([mw for _, mw in gpus]) / 1e3 if gpus else None,
               "wall_s": wall_s, "images": images, "mj_per_image": board_w * wall_s / images * 1e3,
               "idle_w": None, "net_mj_per_image": None, "coverage": round(covered, 3)}
        if self.idle_mw is not None:
            idle_w = self.idle_mw / 1e3
            out.update(idle_w=idle_w, net_mj_per_image=(board_w - idle_w) * wall_s / images * 1e3)
        note = None
        if covered < COVERED:
            note = (f"tegrastats readings cover {covered:.0%} of the {wall_s:.2f} s of timed calls ("
                    + (f"its output ended {ended}" if ended else "it printed none for the rest")
                    + "): its power figures (*) are from that part only")
        return out, note

    def add_to(self, stats: dict, end: float, batch: int) -> List[str]:
        """Put the power of the timed calls `stats` describes (ended at `end`) into `stats["power"]`; the notes
        to add: why there is none, or what part of the calls it covers."""
        figures, note = self.window(end, stats["wall_s"], batch * stats["iterations"])
        if figures is not None:
            stats["power"] = figures
        return [f"batch {batch}: {note}"] if note else []

    def stop(self) -> List[str]:
        """End tegrastats (its whole process group) and its reader; the notes on what of its output was dropped."""
        self.child.stop()
        lines = self.child.lines
        notes = []
        if lines is not None and lines.dropped:
            notes.append(f"tegrastats printed {lines.dropped} line(s) longer than {LINE_MAX // 1024} KiB: "
                         "dropped unread")
        if self.forgotten:
            notes.append(f"tegrastats printed readings faster than kept ({self.forgotten} of the oldest dropped, "
                         f"to hold at most {READINGS_BYTES >> 20} MiB of them)")
        return notes


# the report's columns (bench.report): present only when some row was measured on a Jetson
HEAD = ["board W", "GPU W", "mJ/img", "net mJ/img"]


def row_fields(stats: dict) -> dict:
    """The power fields of one table row (none when its batch was not measured)."""
    p = stats.get("power")
    if not p:
        return {}
    return {"board_w": p["board_w"], "gpu_w": p["gpu_w"], "mj_per_image": p["mj_per_image"],
            "net_mj_per_image": p["net_mj_per_image"], "power_coverage": p.get("coverage", 1.0)}


def cells(row: dict) -> List[str]:
    """The power cells of a table row ("-" where a value was not measured)."""
    part = "*" if row.get("power_coverage", 1.0) < COVERED else ""  # from part of the timed calls only

    def f(key: str, fmt: str) -> str:
        v = row.get(key)
        return "-" if v is None else format(v, fmt) + part

    return [f("board_w", ".2f"), f("gpu_w", ".2f"), f("mj_per_image", ".3f"), f("net_mj_per_image", ".3f")]


def footnote(report: dict) -> Optional[str]:
    """What the power columns are, from the readings themselves; None when nothing was measured."""
    measured = [s["power"] for a in report["artifacts"] for s in a["latency"].values() if s.get("power")]
    if not measured:
        return None
    boards = sorted({p["board_rail"] for p in measured})
    gpus = sorted({p["gpu_rail"] for p in measured if p["gpu_rail"]})
    idle = sorted({round(p["idle_w"], 2) for p in measured if p["idle_w"] is not None})
    part = any(p.get("coverage", 1.0) < COVERED for p in measured)
    return (f"power (tegrastats every {INTERVAL_MS} ms during the timed calls): board W = mean of "
            f"{', '.join(boards)}; GPU W = {', '.join(gpus) or 'no GPU rail'}; mJ/img = board W x timed wall s / "
            "images x 1000, idle draw included; net mJ/img subtracts the idle draw measured before the first batch "
            f"({', '.join(f'{w:.2f}' for w in idle) or '-'} W)"
            + ("; * from readings that cover only part of the timed calls (see the notes)" if part else ""))
