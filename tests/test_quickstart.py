"""The README's main job, `mlit-edge quickstart`, end to end on a tiny model: train, build three
artifacts, bench them against the checkpoint in fresh processes, and continue on a second call."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from tests.helpers import ROOT, TINY, run_cli  # noqa: E402

pytest.importorskip("onnxruntime")



@pytest.mark.slow
def test_quickstart_chain_on_a_tiny_model(tmp_path, monkeypatch):
    """In this process (the bench still runs each artifact in a fresh one): what is checked is the command's
    files, table and messages; the real-size run below is the one in a process of its own. The second run checks
    what a re-run reuses (the training and the fp32 export), so its bench, the first run's again, is left out."""
    env = {"XDG_CACHE_HOME": str(tmp_path / "cache")}
    cmd = ["quickstart", "--train", "--out", tmp_path / "qs", "--epochs", "1", "--batch-size", "250", "--batch", "1,4",
           "--duration", "0.05", "--no-progress", *TINY]
    proc = run_cli(*cmd, env=env)
    table = proc.stdout.splitlines()
    assert sum(line.startswith("mlit-xxs-") or line.startswith("checkpoint.pt") for line in table) == 8, proc.stdout
    report = json.loads((tmp_path / "qs" / "bench.json").read_text())
    by = {a["precision"] + "/" + a["format"]: a for a in report["artifacts"]}
    assert set(by) == {"fp32/onnxruntime", "fp16/onnxruntime", "int8/onnxruntime", "fp32/torch"}
    assert all(a["isolated"] and set(a["latency"]) == {"1", "4"} for a in report["artifacts"])
    fp32 = by["fp32/onnxruntime"]["accuracy"]
    assert fp32["agreement"] == 1.0 and min(fp32["routing_agreement"]) == 1.0 and fp32["max_abs_err"] < 1e-3
    assert by["fp32/torch"]["accuracy"]["top1_delta"] == 0.0
    assert 0.0 <= by["int8/onnxruntime"]["accuracy"]["top1"] <= 1.0
    assert by["int8/onnxruntime"]["label"] == "mlit-xxs-custom-int8-ort.onnx"  # the flavour ONNX Runtime runs fastest
    import torch  # the README's from-scratch recipe: positions start at the sin-cos table

    assert torch.load(tmp_path / "qs" / "run" / "checkpoint.pt", weights_only=True)["config"]["pos_init"] == "sincos"
    benched = []
    monkeypatch.setattr("mlit_edge.quickstart.bench_and_save", lambda paths, *a, **k: benched.append(paths) or report)
    again = run_cli(*cmd, env=env)
    assert [Path(p).name for p in benched[0]] == ["mlit-xxs-custom-fp32-ort.onnx", "mlit-xxs-custom-fp16.onnx",
                                                  "mlit-xxs-custom-int8-ort.onnx", "checkpoint.pt"], benched
    assert "already holds 1 epochs, reusing it" in again.stderr
    assert "reusing" in again.stderr  # the fp32 export of the same checkpoint


@pytest.mark.slow
def test_quickstart_default_starts_from_the_pretrained_model(tmp_path):
    """The README's main job on its defaults (the real XXS): no training, a 98% model in the table."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "XDG_CACHE_HOME": str(tmp_path / "cache")}
    cmd = [sys.executable, "-m", "mlit_edge.cli", "quickstart", "--out", str(tmp_path / "qs"), "--batch", "1",
           "--duration", "0.05", "--no-progress"]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "start from pretrained:xxs-mnist5k" in proc.stderr and "train mLiT" not in proc.stderr
    assert "INFO:mlit_edge" not in proc.stderr  # each progress line once, as written (no root-logger echo)
    report = json.loads((tmp_path / "qs" / "bench.json").read_text())
    by = {a["label"]: a for a in report["artifacts"]}
    assert set(by) == {"mlit-xxs-fp32-ort.onnx", "mlit-xxs-fp16.onnx", "mlit-xxs-int8-ort.onnx", "xxs-mnist5k"}
    fp32, int8 = by["mlit-xxs-fp32-ort.onnx"]["accuracy"], by["mlit-xxs-int8-ort.onnx"]["accuracy"]
    assert fp32["top1"] >= 0.98 and fp32["agreement"] == 1.0 and min(fp32["routing_agreement"]) == 1.0
    assert abs(int8["top1_delta"]) <= 0.01 and all(a["reference_match"] for a in report["artifacts"])
