"""`mlit-edge bench`: statistics, fidelity, routing agreement, the report's schema and refusals."""
import json
import logging
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch

pytest.importorskip("onnxruntime")

from mlit_edge.bench.fidelity import fidelity  # noqa: E402
from mlit_edge.base.routing import routing_agreement  # noqa: E402
from mlit_edge.bench.host import peak_rss_mb  # noqa: E402
from mlit_edge.bench.report import format_bench  # noqa: E402
from mlit_edge.bench.options import BenchConfig  # noqa: E402
from mlit_edge.bench.suite import run_bench  # noqa: E402
from mlit_edge.bench.stats import latency_stats, percentile, time_runner  # noqa: E402
from mlit_edge.train.checkpoint import make_checkpoint  # noqa: E402
from mlit_edge.model.config import MLiTConfig  # noqa: E402
from mlit_edge.train.data import load_dataset  # noqa: E402
from mlit_edge.engine.plan import write_plan  # noqa: E402
from mlit_edge.export.onnx_export import export_onnx
from mlit_edge.export.source import load_for_export  # noqa: E402
from mlit_edge.devices.trt_env import import_trt  # noqa: E402
from mlit_edge.model.mlit import MLiT  # noqa: E402
from tests.helpers import run_cli  # noqa: E402

FAST = BenchConfig(batches=(1, 4), warmup_ms=0, warmup_iters=2, duration_s=None, iterations=5, limit=64,
                   isolate=False)  # in this process; the default, each artifact in its own, is asked for by name


def tiny(seed: int = 0) -> MLiT:
    torch.manual_seed(seed)
    return MLiT(MLiTConfig(img_size=36, num_classes=10, dim=24, depth=3, heads=4, groups=2, hidden_first=16,
                           hidden_last=8, noisy_gating=False)).eval()


def save_ckpt(model: MLiT, path: Path) -> Path:
    meta = load_dataset("mnist5k", "test").meta()
    torch.save(make_checkpoint("mlit", model, model.cfg, "xxs", meta), path)
    return path


def export(model: MLiT, path: Path, ckpt: Path | None) -> Path:
    _, info = load_for_export(str(ckpt), None) if ckpt else load_for_export(None, "xxs", 10, random_weights=True)
    export_onnx(model, path, info)
    return path


@pytest.fixture(scope="module")
def trio(tmp_path_factory):
    """A checkpoint, its fp32 ONNX, and the ONNX of a copy whose router was perturbed. Its two exports
    take 5-10 s per worker, and its users bench in subprocesses: they are all marked `slow`."""
    d = tmp_path_factory.mktemp("bench")
    model = tiny()
    ckpt = save_ckpt(model, d / "ref.pt")
    good = export(model, d / "good.onnx", ckpt)
    bent = tiny()
    with torch.no_grad():
        for blk in bent.blocks:
            blk.moe.gate.w_gate.weight.add_(0.5 * torch.randn_like(blk.moe.gate.w_gate.weight))
    bad = export(bent, d / "bent.onnx", ckpt)
    return ckpt, good, bad


def test_percentiles_and_stats_match_hand_computation():
    s = list(range(10, 0, -1))  # 10..1, unsorted on purpose
    srt = sorted(s)
    assert percentile(srt, 50) == 5 and percentile(srt, 90) == 9 and percentile(srt, 95) == 10
    assert percentile(srt, 99) == 10 and percentile(srt, 10) == 1 and percentile([7.0], 99) == 7.0
    four = sorted([4.0, 1.0, 3.0, 2.0])
    assert percentile(four, 50) == 2.0 and percentile(four, 75) == 3.0 and percentile(four, 76) == 4.0
    stats = latency_stats(s, batch=8, wall_s=0.11)
    assert stats["min"] == 1 and stats["max"] == 10 and stats["mean"] == 5.5 and stats["median"] == 5
    assert stats["p90"] == 9 and stats["p95"] == 10 and stats["p99"] == 10 and stats["iterations"] == 10
    assert stats["throughput"] == pytest.approx(8 * 10 / 0.11)
    with pytest.raises(ValueError):
        percentile([], 50)


def test_timer_warms_up_by_time_and_by_count():
    calls = []
    stats = time_runner(lambda: calls.append(1), batch=1, warmup_ms=0, warmup_iters=7, duration_s=None,
                        iterations=13)
    assert stats["warmup_iterations"] == 7 and stats["iterations"] == 13 and len(calls) == 20
    stats = time_runner(lambda: None, batch=1, warmup_ms=30, warmup_iters=1, duration_s=0.02)
    assert stats["warmup_iterations"] > 1 and stats["iterations"] >= 10  # time-bound warm-up, min 10 timed calls


def test_fidelity_is_exact_for_identical_outputs():
    x = np.random.default_rng(0).standard_normal((50, 10)).astype(np.float32)
    x[3] = 0.0  # a zero row must not make the cosine NaN
    labels = x.argmax(1)
    f = fidelity(x, x.copy(), labels)
    assert f["max_abs_err"] == 0.0 and f["mean_abs_err"] == 0.0 and f["cosine"] == 1.0
    assert f["agreement"] == 1.0 and f["top1_delta"] == 0.0 and f["top1"] == f["top1_reference"]
    g = fidelity(x + 0.5, x, labels)
    assert g["max_abs_err"] == pytest.approx(0.5) and g["cosine"] < 1.0


def test_routing_agreement_counts_sets_not_order():
    a = np.array([[[0, 1], [2, 3]]])
    assert routing_agreement([a], [a[..., ::-1]]) == [1.0]
    assert routing_agreement([a], [np.array([[[0, 1], [2, 4]]])]) == [0.5]


@pytest.mark.slow
def test_fp32_onnx_routes_as_torch_and_a_perturbed_router_does_not(trio):
    ckpt, good, bad = trio
    report = run_bench([str(good), str(bad), str(ckpt)], FAST)
    by = {a["label"]: a for a in report["artifacts"]}
    g, b, t = by["good.onnx"]["accuracy"], by["bent.onnx"]["accuracy"], by["ref.pt"]["accuracy"]
    assert g["routing_agreement"] == [1.0, 1.0, 1.0] and g["agreement"] == 1.0 and g["max_abs_err"] < 1e-4
    assert min(b["routing_agreement"]) < 1.0
    assert t["max_abs_err"] == 0.0 and t["cosine"] == 1.0 and t["routing_agreement"] == [1.0, 1.0, 1.0]


@pytest.mark.slow
def test_artifacts_of_another_model_are_flagged_against_the_reference(trio, tmp_path):
    ckpt, good, _ = trio
    other_model = tiny(seed=1)
    other = export(other_model, tmp_path / "other.onnx", save_ckpt(other_model, tmp_path / "other.pt"))
    random = export(tiny(seed=2), tmp_path / "random.onnx", None)
    lines, logger = [], logging.getLogger("mlit_edge")  # the CLI's loggers do not propagate to pytest's
    handler, level = logging.Handler(), logger.level
    handler.emit = lambda record: lines.append(record.getMessage())
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        report = run_bench([str(good), str(other), str(random), str(ckpt)], replace(FAST, batches=(1,)))
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
    match = {a["label"]: a["reference_match"] for a in report["artifacts"]}
    assert match == {"good.onnx": True, "other.onnx": False, "random.onnx": False, "ref.pt": True}
    notes = {a["label"]: " ".join(a["notes"]) for a in report["artifacts"]}
    assert "compare two different models" in notes["other.onnx"] and "other.pt" in notes["other.onnx"]
    assert "random weights" in notes["random.onnx"] and "different models" not in notes["good.onnx"]
    assert any("other.onnx" in line and "different models" in line for line in lines)  # said before measuring
    assert "note: other.onnx: built from" in format_bench(report)


@pytest.mark.slow
def test_isolated_bench_matches_in_process_and_measures_each_artifact_afresh(trio):
    """Each artifact in its own process: the same accuracy and fidelity as in one process, and every
    artifact's load memory is its own (in one process later ones reuse memory freed by earlier ones)."""
    ckpt, good, bad = trio
    paths = [str(good), str(bad), str(ckpt)]
    one = run_bench(paths, FAST)
    iso = run_bench(paths, replace(FAST, isolate=True))
    assert [a["artifact"] for a in iso["artifacts"]] == paths and len(iso["rows"]) == len(one["rows"]) == 6
    for a, b in zip(one["artifacts"], iso["artifacts"]):
        assert not a["isolated"] and b["isolated"]
        assert a["accuracy"] == b["accuracy"]  # same reference, same images, deterministic runners
        assert b["load_rss_mb"] > 0 and b["process_peak_rss_mb"] >= max(s["peak_rss_mb"] for s in b["latency"].values())
    # an ONNX child never imports torch, so its own peak sits far below this torch-laden process's
    # (getrusage's peak would have carried the parent's over exec)
    assert all(b["process_peak_rss_mb"] < 0.8 * peak_rss_mb() for b in iso["artifacts"][:2]), \
        [(b["process_peak_rss_mb"], peak_rss_mb()) for b in iso["artifacts"]]
    assert "each artifact in its own process" in format_bench(iso)


@pytest.mark.slow
def test_ort_arena_switch_reaches_the_session_and_changes_no_output(trio):
    ckpt, good, _ = trio
    on = run_bench([str(good)], replace(FAST, reference=str(ckpt)))
    off = run_bench([str(good)], replace(FAST, reference=str(ckpt), ort_arena=False, isolate=True))
    assert on["artifacts"][0]["settings"]["cpu_mem_arena"] is True  # as the session has it
    assert off["artifacts"][0]["settings"]["cpu_mem_arena"] is False  # the child process's session
    assert on["artifacts"][0]["accuracy"] == off["artifacts"][0]["accuracy"]
    assert off["config"]["ort_arena"] is False and "CPU arena off" in format_bench(off)
    assert "CPU arena off" not in format_bench(on)


def test_files_that_cannot_be_artifacts_are_refused_before_anything_is_measured(tmp_path):
    bad, empty = tmp_path / "broken.onnx", tmp_path / "empty.onnx"
    bad.write_bytes(b"not an onnx model")
    empty.write_bytes(b"")
    for path, message in ((bad, "is not an ONNX model"), (empty, "is empty")):
        with pytest.raises(ValueError, match=message + ".*nothing was measured"):
            run_bench([str(path)], replace(FAST, isolate=True, data="mnist5k"))


@pytest.mark.slow
def test_an_artifact_that_fails_mid_run_is_its_row_and_the_rest_are_reported(trio, tmp_path):
    """Garbage behind a right header, last in a glob (or a file deleted mid-run): that artifact's error, while
    the others are measured, printed, saved in --json, and the exit status says not all were benched."""
    ckpt, good, _ = trio
    bad = tmp_path / "zz-broken.onnx"
    bad.write_bytes(b"\x08" + b"\xff" * 64)  # passes the header check, fails to load
    out = tmp_path / "r.json"
    proc = run_cli("bench", good, bad, "--reference", ckpt, "--batch", "1", "--iterations", "3", "--warmup-ms", "0",
                   "--limit", "16", "--json", out, check=False)
    assert proc.returncode == 1, proc.stderr[-2000:]
    assert "good.onnx" in proc.stdout and "error: zz-broken.onnx: not benched:" in proc.stdout
    assert "1 of 2 artifacts could not be benched (zz-broken.onnx: " in proc.stderr
    assert len(proc.stderr.strip().splitlines()[-1]) < 600  # one line, not a traceback
    r = json.loads(out.read_text())
    assert [a["label"] for a in r["artifacts"]] == ["good.onnx"] and len(r["rows"]) == 1
    assert [f["label"] for f in r["failed"]] == ["zz-broken.onnx"] and r["failed"][0]["error"]
    in_process = run_bench([str(good), str(bad)], replace(FAST, reference=str(ckpt), limit=16))
    assert len(in_process["artifacts"]) == 1 and in_process["failed"][0]["label"] == "zz-broken.onnx"


@pytest.mark.slow
def test_report_schema_through_the_cli(trio, tmp_path):
    ckpt, good, _ = trio
    out = tmp_path / "r.json"
    proc = run_cli("bench", good, ckpt, "--batch", "1,2", "--iterations", "5", "--warmup-ms", "0", "--limit", "32",
                   "--json", out, "--plot", tmp_path / "p")
    assert "p50 ms" in proc.stdout and "good.onnx" in proc.stdout and "harness overhead" in proc.stdout
    r = json.loads(out.read_text())
    assert r["schema"] == "mlit-edge-bench/1"
    assert {"cpu", "cores", "threads", "libraries", "gpu", "python"} <= set(r["environment"])
    assert "onnxruntime" in r["environment"]["libraries"]
    assert r["harness_overhead"]["median_us"] > 0
    assert r["config"]["images"] == 32 and r["config"]["batches"] == [1, 2]
    assert len(r["rows"]) == 4 and len(r["artifacts"]) == 2
    row_keys = {"artifact", "format", "precision", "batch", "size_mb", "top1", "top1_delta", "agreement",
                "routing_agreement", "p50_ms", "p99_ms", "fps", "run_rss_mb", "load_rss_mb", "gpu_p50_ms",
                "device_mb"}
    for row in r["rows"]:
        assert set(row) == row_keys
        assert row["p99_ms"] >= row["p50_ms"] > 0 and row["fps"] > 0 and 0 <= row["top1"] <= 1
    for a in r["artifacts"]:
        for stats in a["latency"].values():
            assert len(stats["samples_ms"]) == stats["iterations"] == 5
            assert stats["min"] <= stats["median"] <= stats["p90"] <= stats["p95"] <= stats["p99"] <= stats["max"]
    assert (tmp_path / "p" / "latency.png").stat().st_size > 0
    assert (tmp_path / "p" / "accuracy_latency.png").stat().st_size > 0


def test_bench_plan_without_gpu_is_one_line_and_measures_nothing(tmp_path):
    trt = import_trt()
    module, version = (trt.__name__, trt.__version__) if trt else ("tensorrt", "10.3.0")
    plan = tmp_path / "m.plan"
    write_plan(b"not really an engine", plan, {
        "kind": "tensorrt-engine", "target": "tensorrt-rtx" if module == "tensorrt_rtx" else "tensorrt",
        "precision": "fp16", "engine": {"builder": {"module": module, "version": version},
                                        "device": {"compute_capability": None}}})
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    proc = run_cli("bench", plan, "--json", tmp_path / "r.json", check=False)
    assert proc.returncode == 1 and proc.stdout == ""
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and any(w in lines[0] for w in ("no CUDA GPU", "not installed", "no TensorRT")), proc.stderr
    assert not (tmp_path / "r.json").exists()


def test_unknown_artifact_and_missing_files_are_one_line(tmp_path):
    (tmp_path / "x.bin").write_bytes(b"123")
    for arg, words in [(tmp_path / "x.bin", "unknown artifact type"), (tmp_path / "nope.onnx", "does not exist")]:
        proc = run_cli("bench", arg, check=False)
        assert proc.returncode != 0 and words in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.gpu
@pytest.mark.slow
def test_tensorrt_runner_matches_onnxruntime_on_a_gpu(trio, tmp_path):
    """Real TensorRT + CUDA only: the plan's logits equal the ONNX Runtime logits to fp32 tolerance."""
    pytest.importorskip("tensorrt")
    pytest.importorskip("cuda.bindings")
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    from mlit_edge.engine.build import BuildRequest, run_build

    _, good, _ = trio
    res = run_build(BuildRequest(precision="fp32", onnx=str(good), target="tensorrt", out=str(tmp_path),
                                 evaluate=False))
    report = run_bench([str(res.artifact), str(good)], FAST)
    plan, ort = report["artifacts"]
    assert plan["accuracy"]["top1"] == pytest.approx(ort["accuracy"]["top1"], abs=0.02)
    assert "gpu_compute" in plan["latency"]["1"]


def test_nan_logits_count_as_wrong_not_as_class_0():
    """argmax takes NaN for the maximum: all-NaN rows would be class 0, top-1 1.0 on labels of 0."""
    from mlit_edge.bench.fidelity import predicted

    nan, labels = np.full((4, 3), np.nan), np.zeros(4, np.int64)
    good = np.eye(3)[labels]
    assert list(predicted(np.vstack([good[:1], nan[:1]]))) == [0, -1]
    out = fidelity(nan, good, labels)
    assert (out["top1"], out["agreement"], out["top1_reference"]) == (0.0, 0.0, 1.0)


def test_table_labels_tell_apart_one_name_in_two_folders_and_escape_codes():
    from mlit_edge.bench.suite import table_labels

    paths = ["a/m.onnx", "b/m.onnx", "x\x1b[2J.onnx", "c.plan", "w/xxs-mnist5k/model.safetensors"]
    assert list(table_labels(paths).values()) == ["a/m.onnx", "b/m.onnx", "x\\x1b[2J.onnx", "c.plan", "xxs-mnist5k"]
