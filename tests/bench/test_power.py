"""Power and energy per image on a Jetson (bench.power): the rails of real tegrastats lines from JetPack 4 to 7
(tests/data/tegrastats, sources in its README), and `bench` sampling a tegrastats stand-in on PATH that it
really launches; off a Jetson the power columns are absent, not zero."""
import os
import stat
import sys
import time
from pathlib import Path

import pytest

from mlit_edge.bench import power
from mlit_edge.bench.options import BenchConfig
from mlit_edge.bench.report import format_bench
from mlit_edge.bench.suite import run_bench

DATA = Path(__file__).resolve().parent.parent / "data" / "tegrastats"

# per file and line: (board rail, board mW, GPU rail, GPU mW), read off each line by hand
EXPECTED = {
    "jetpack4-nano.txt": [("POM_5V_IN", 4520, "POM_5V_GPU", 0)],
    "jetpack4-tx2.txt": [("VDD_IN", 5297, "VDD_SYS_GPU", 182)],
    "jetpack4-agx-xavier.txt": [("sum of CPU+CV+GPU+SOC+SYS5V+VDDRQ", 1155 + 385 + 2502 + 0 + 192 + 2692, "GPU", 1155)],
    "jetpack5-agx-orin.txt": [("sum of VDDQ_VDD2_1V8AO+VDD_CPU_CV+VDD_GPU_SOC+VIN_SYS_5V0", 2340 + 390 + 4025 + 301,
                               "VDD_GPU_SOC", 2340)],
    "jetpack6-orin-nano.txt": [("VDD_IN", 5704, "VDD_CPU_GPU_CV", 831), ("VDD_IN", 3913, "VDD_CPU_GPU_CV", 598)],
    "jetpack7-agx-orin.txt": [("sum of VDD_CPU_CV+VDD_GPU_SOC+VIN_SYS_5V0", 5139 + 3268 + 5500, "VDD_GPU_SOC", 5139)],
}
FAST = BenchConfig(batches=(1, 2), warmup_ms=0, warmup_iters=2, duration_s=0.4, limit=8, isolate=False)


def test_every_file_is_covered_and_documented():
    assert sorted(p.name for p in DATA.glob("*.txt")) == sorted(EXPECTED)
    readme = (DATA / "README.md").read_text()
    assert all(f"`{name}`" in readme for name in EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_the_rails_of_real_lines(name):
    lines = (DATA / name).read_text().splitlines()
    assert len(lines) == len(EXPECTED[name])
    for line, (board, board_mw, gpu, gpu_mw) in zip(lines, EXPECTED[name]):
        rails = power.parse_rails(line)
        assert not {"RAM", "SWAP", "IRAM", "NC"} & set(rails)  # memory and unconnected channels are not rails
        assert power.board_rail(rails) == (board, board_mw)
        assert power.gpu_rail(rails) == (gpu, gpu_mw)


def test_a_line_without_rails_gives_none():
    """tegrastats without its INA3221 readable (some images need root): no rails, so no power figure."""
    assert power.parse_rails("RAM 2257/30536MB (lfb 5392x4MB) SWAP 0/15268MB (cached 0MB) CPU [10%@729] "
                             "EMC_FREQ 0% GR3D_FREQ 75% cpu@41.375C/41.3C") == {}


def _stand_in(folder: Path, line: str, log: Path) -> Path:
    """A `tegrastats` on PATH that records how it was started, then prints `line` every --interval ms."""
    folder.mkdir()
    exe = folder / "tegrastats"
    exe.write_text(f"""#!{sys.executable}
import sys, time
open({str(log)!r}, "w").write(" ".join(sys.argv[1:]))
interval = int(sys.argv[sys.argv.index("--interval") + 1]) / 1000
while True:
    print({line!r}, flush=True)
    time.sleep(interval)
""")
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    return folder


def test_bench_samples_tegrastats_and_reports_energy_per_image(tmp_path, monkeypatch, tiny_onnx):
    line = (DATA / "jetpack6-orin-nano.txt").read_text().splitlines()[0]  # VDD_IN 5704 mW, VDD_CPU_GPU_CV 831
    log = tmp_path / "argv"
    monkeypatch.setenv("PATH", f"{_stand_in(tmp_path / 'bin', line, log)}{os.pathsep}{os.environ['PATH']}")
    report = run_bench([str(tiny_onnx)], FAST)
    assert log.read_text() == f"--interval {power.INTERVAL_MS}"  # bench launched it, at its interval
    for row, (batch, stats) in zip(report["rows"], report["artifacts"][0]["latency"].items()):
        p = stats["power"]
        assert p["samples"] >= power.MIN_SAMPLES and p["board_rail"] == "VDD_IN" and p["gpu_rail"] == "VDD_CPU_GPU_CV"
        assert row["board_w"] == pytest.approx(5.704) and row["gpu_w"] == pytest.approx(0.831)
        images = int(batch) * stats["iterations"]
        assert row["mj_per_image"] == pytest.approx(5.704 * stats["wall_s"] / images * 1e3)
        assert p["idle_w"] == pytest.approx(5.704) and row["net_mj_per_image"] == pytest.approx(0, abs=1e-9)
    table = format_bench(report)
    assert "board W" in table and "mJ/img" in table and "mean of VDD_IN" in table and "5.70" in table
    time.sleep(0.3)
    mtime = log.stat().st_mtime
    assert not [p for p in Path("/proc").glob("[0-9]*") if _is_stand_in(p, tmp_path)]  # stopped with the bench
    assert log.stat().st_mtime == mtime


def _is_stand_in(proc: Path, tmp_path: Path) -> bool:
    try:
        return str(tmp_path / "bin" / "tegrastats") in (proc / "cmdline").read_bytes().decode(errors="replace")
    except OSError:
        return False


def test_off_a_jetson_the_power_columns_are_absent(tmp_path, monkeypatch, tiny_onnx):
    monkeypatch.setenv("PATH", str(tmp_path))  # no tegrastats anywhere on it
    report = run_bench([str(tiny_onnx)], FAST)
    assert all("power" not in s for s in report["artifacts"][0]["latency"].values())
    assert all("board_w" not in r and "mj_per_image" not in r for r in report["rows"])
    table = format_bench(report)
    assert "board W" not in table and "mJ/img" not in table and "tegrastats" not in table


def test_a_timed_run_shorter_than_two_readings_is_a_note_not_a_figure(tmp_path, monkeypatch, tiny_onnx):
    line = (DATA / "jetpack4-nano.txt").read_text().strip()
    monkeypatch.setenv("PATH", f"{_stand_in(tmp_path / 'bin', line, tmp_path / 'argv')}{os.pathsep}"
                               f"{os.environ['PATH']}")
    cfg = BenchConfig(batches=(1,), warmup_ms=0, warmup_iters=1, duration_s=None, iterations=3, limit=8, isolate=False)
    report = run_bench([str(tiny_onnx)], cfg)
    assert "board_w" not in report["rows"][0]
    assert any("tegrastats reading(s)" in n and "--duration" in n for n in report["artifacts"][0]["notes"])


def test_tegrastats_without_rails_is_a_note(tmp_path, monkeypatch, tiny_onnx):
    line = "RAM 2257/30536MB (lfb 5392x4MB) SWAP 0/15268MB (cached 0MB) CPU [10%@729] GR3D_FREQ 75% cpu@41.3C"
    monkeypatch.setenv("PATH", f"{_stand_in(tmp_path / 'bin', line, tmp_path / 'argv')}{os.pathsep}"
                               f"{os.environ['PATH']}")
    report = run_bench([str(tiny_onnx)], FAST)
    assert all("board_w" not in r for r in report["rows"])
    assert any("no power rails" in n and "root" in n for n in report["artifacts"][0]["notes"])
