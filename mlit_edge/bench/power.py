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
power field appears: absent, not zero. Python 3.8 compatible: this runs on JetPack 5.
"""
from __future__ import annotations

import re
import shutil
import subprocess
import threading
import time
import weakref
from typing import Dict, List, Optional, Tuple

INTERVAL_MS = 100  # tegrastats' sampling interval: 20 readings in bench's default 2 s of timed calls
BASELINE_S = 0.5  # the idle window before the first batch
MIN_SAMPLES = 2  # fewer readings than this in a timed window: no power figure for it, and a note
INPUT_RAILS = ("VDD_IN", "POM_5V_IN")  # the board's input, where the module measures it
NOT_CONNECTED = ("NC",)  # AGX Orin prints unconnected INA3221 channels as "NC 0mW/0mW"

# NAME CUR[mW]/AVG[mW][/MAX[mW]], then a space or the end: "RAM 3162/7620MB" and "cpu@52.9C/52.9C" are not rails
RAIL = re.compile(r"(?:^|\s)([A-Za-z][A-Za-z0-9_]*) (\d+(?:\.\d+)?)(?:mW)?/\d+(?:\.\d+)?(?:mW)?"
                  r"(?:/\d+(?:\.\d+)?(?:mW)?)?(?=\s|$)")
MEMORY = ("RAM", "SWAP", "IRAM")  # X/Y without a unit only in the rare line whose MB was cut off


def parse_rails(line: str) -> Dict[str, float]:
    """Every power rail of one tegrastats line: name -> current reading in mW (empty when it has none)."""
    return {name: float(cur) for name, cur in RAIL.findall(line)
            if name not in MEMORY and name not in NOT_CONNECTED}


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


class PowerSampler:
    """`tegrastats` running beside the bench, its readings stamped with `time.perf_counter` as they arrive.

    `start()` returns None where there is no tegrastats (not a Jetson); `window(end, wall_s, images)` is the
    power and energy of the timed calls that ended at `end` and took `wall_s`.
    """

    def __init__(self, command: List[str]) -> None:
        self.command = command
        self.samples: List[Tuple[float, Dict[str, float]]] = []
        self.error: Optional[str] = None
        self.idle_mw: Optional[float] = None
        self._proc: Optional[subprocess.Popen] = None
        self._reader: Optional[threading.Thread] = None

    @classmethod
    def start(cls, interval_ms: int = INTERVAL_MS, baseline_s: float = BASELINE_S) -> Optional["PowerSampler"]:
        exe = shutil.which("tegrastats")
        if exe is None:
            return None
        sampler = cls([exe, "--interval", str(interval_ms)])
        sampler._launch()
        sampler._baseline(baseline_s, interval_ms)
        return sampler

    def _launch(self) -> None:
        try:  # line-buffered text: each reading is read, and stamped, when it is printed
            self._proc = subprocess.Popen(self.command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                          stdin=subprocess.DEVNULL, text=True, bufsize=1)
        except OSError as e:
            self.error = f"tegrastats did not start ({e.strerror or e})"
            return
        # ended with the interpreter too, should the bench fail before `stop`: tegrastats would run on forever
        weakref.finalize(self, _end, self._proc)
        self._reader = threading.Thread(target=self._read, name="tegrastats", daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self._proc is not None and self._proc.stdout is not None
        for line in self._proc.stdout:
            rails = parse_rails(line)
            if rails:
                self.samples.append((time.perf_counter(), rails))

    def _baseline(self, seconds: float, interval_ms: int) -> None:
        """The idle draw: the readings of `seconds` (at least MIN_SAMPLES intervals) before any timed call."""
        t0 = time.perf_counter()
        time.sleep(max(seconds, MIN_SAMPLES * interval_ms / 1e3))
        idle = [board_rail(r)[1] for t, r in list(self.samples) if t >= t0]
        self.idle_mw = _mean(idle) if len(idle) >= MIN_SAMPLES else None

    def window(self, end: float, wall_s: float, images: int) -> Tuple[Optional[dict], Optional[str]]:
        """Power and energy of the timed calls in [end - wall_s, end]: (figures, None), or (None, why not)."""
        if self.error:
            return None, self.error
        if not self.samples:  # running, but no rail in its lines: the INA3221 needs root on some images
            return None, "tegrastats printed no power rails (on some JetPack images it needs root): power not measured"
        inside = [r for t, r in list(self.samples) if end - wall_s <= t <= end]
        if len(inside) < MIN_SAMPLES:
            return None, (f"{len(inside)} tegrastats reading(s) in {wall_s:.2f} s of timed calls: power not "
                          f"measured (time longer: --duration)")
        board = [board_rail(r) for r in inside]
        gpus = [g for g in (gpu_rail(r) for r in inside) if g is not None]
        board_w = _mean([mw for _, mw in board]) / 1e3
        out = {"samples": len(inside), "board_rail": board[-1][0], "board_w": board_w,
               "gpu_rail": gpus[-1][0] if gpus else None,
               "gpu_w": _mean([mw for _, mw in gpus]) / 1e3 if gpus else None,
               "wall_s": wall_s, "images": images, "mj_per_image": board_w * wall_s / images * 1e3,
               "idle_w": None, "net_mj_per_image": None}
        if self.idle_mw is not None:
            idle_w = self.idle_mw / 1e3
            out.update(idle_w=idle_w, net_mj_per_image=(board_w - idle_w) * wall_s / images * 1e3)
        return out, None

    def add_to(self, stats: dict, end: float, batch: int) -> List[str]:
        """Put the power of the timed calls `stats` describes (ended at `end`) into `stats["power"]`; the notes
        to add when there is none."""
        figures, why = self.window(end, stats["wall_s"], batch * stats["iterations"])
        if figures is None:
            return [f"batch {batch}: {why}"]
        stats["power"] = figures
        return []

    def stop(self) -> None:
        """End tegrastats and its reader."""
        if self._proc is not None:
            _end(self._proc)
        if self._reader is not None:
            self._reader.join(timeout=5)


def _end(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


# the report's columns (bench.report): present only when some row was measured on a Jetson
HEAD = ["board W", "GPU W", "mJ/img", "net mJ/img"]


def row_fields(stats: dict) -> dict:
    """The power fields of one table row (none when its batch was not measured)."""
    p = stats.get("power")
    if not p:
        return {}
    return {"board_w": p["board_w"], "gpu_w": p["gpu_w"], "mj_per_image": p["mj_per_image"],
            "net_mj_per_image": p["net_mj_per_image"]}


def cells(row: dict) -> List[str]:
    """The power cells of a table row ("-" where a value was not measured)."""
    def f(key: str, fmt: str) -> str:
        v = row.get(key)
        return "-" if v is None else format(v, fmt)

    return [f("board_w", ".2f"), f("gpu_w", ".2f"), f("mj_per_image", ".3f"), f("net_mj_per_image", ".3f")]


def footnote(report: dict) -> Optional[str]:
    """What the power columns are, from the readings themselves; None when nothing was measured."""
    measured = [s["power"] for a in report["artifacts"] for s in a["latency"].values() if s.get("power")]
    if not measured:
        return None
    boards = sorted({p["board_rail"] for p in measured})
    gpus = sorted({p["gpu_rail"] for p in measured if p["gpu_rail"]})
    idle = sorted({round(p["idle_w"], 2) for p in measured if p["idle_w"] is not None})
    return (f"power (tegrastats every {INTERVAL_MS} ms during the timed calls): board W = mean of "
            f"{', '.join(boards)}; GPU W = {', '.join(gpus) or 'no GPU rail'}; mJ/img = board W x timed wall s / "
            "images x 1000, idle draw included; net mJ/img subtracts the idle draw measured before the first batch "
            f"({', '.join(f'{w:.2f}' for w in idle) or '-'} W)")
