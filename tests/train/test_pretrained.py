"""The pretrained mLiT that ships in the package: listed, loaded with its sha256 checked, refused when
changed, and `--random-weights` beside it (README, "Pretrained models")."""
import json
import shutil
import subprocess

import pytest

from mlit_edge.train import pretrained
from mlit_edge.train.checkpoint import load_checkpoint, read_checkpoint
from tests.helpers import CLI, ENV

NAME = "pretrained:xxs-mnist5k"


def test_the_shipped_model_is_listed_small_and_accurate():
    entry = pretrained.entry_of(NAME)
    path = pretrained.WEIGHTS / entry["file"]
    assert path.stat().st_size == entry["bytes"] <= 3.2e6 and entry["top1"] >= 0.98 and entry["test_images"] == 1000
    assert entry["command"].startswith("mlit-edge train") and len(entry["expert_shares"]) == 9
    assert pretrained.default_for("xxs") == NAME and pretrained.default_for("xxs", num_classes=100) is None
    ckpt, sha = read_checkpoint(NAME, kind="mlit")
    assert sha == entry["sha256"] and ckpt["size"] == "xxs" and "optimizer" not in ckpt  # weights only
    proc = subprocess.run([*CLI, "pretrained"], capture_output=True, text=True, env=ENV)
    assert proc.returncode == 0 and NAME in proc.stdout and "mlit-edge train" in proc.stdout


def test_a_changed_weights_file_is_refused_in_one_line(tmp_path, monkeypatch):
    weights = tmp_path / "weights"
    shutil.copytree(pretrained.WEIGHTS, weights)
    monkeypatch.setattr(pretrained, "WEIGHTS", weights)
    monkeypatch.setattr(pretrained, "INDEX", weights / "index.json")
    load_checkpoint(NAME)  # the intact copy loads
    data = bytearray((weights / "xxs-mnist5k.pt").read_bytes())
    data[len(data) // 2] ^= 0x01
    (weights / "xxs-mnist5k.pt").write_bytes(bytes(data))
    with pytest.raises(pretrained.PretrainedError, match="does not match its recorded sha256") as err:
        load_checkpoint(NAME)
    assert "\n" not in str(err.value)
    with pytest.raises(pretrained.PretrainedError, match="no such pretrained model"):
        load_checkpoint("pretrained:nope")


def test_random_weights_build_ignores_the_pretrained_model_and_says_so(tmp_path):
    """`--random-weights` keeps the latency-only path, with its warning, and records it. (The default,
    the pretrained weights named and recorded, is checked by tests/engine/test_build.py on the README's
    first build.)"""
    random = subprocess.run([*CLI, "build", "--size", "xxs", "--precision", "fp32", "--target", "onnxruntime",
                             "--out", str(tmp_path / "r"), "--random-weights"], capture_output=True, text=True, env=ENV)
    assert random.returncode == 0 and "weights are RANDOM" in random.stderr and NAME not in random.stderr
    record = json.loads((tmp_path / "r" / "mlit-xxs-fp32.onnx.json").read_text())
    assert record["random_weights"] and record["checkpoint"] is None


def test_eval_of_the_pretrained_model_repeats_its_recorded_top1():
    from mlit_edge.train.eval_checkpoint import evaluate_checkpoint

    result = evaluate_checkpoint(NAME)
    assert result["top1"] == pytest.approx(pretrained.entry_of(NAME)["top1"], abs=1e-9)
