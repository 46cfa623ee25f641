"""Weights pairs (`model.safetensors` + `config.json`, train.weights_file): written by `mlit-edge export-weights`
and tools/publish_pretrained.py, read back bit for bit without torch.load, refused in one line when either file
was changed or the two do not belong together."""
import json

import pytest
import torch

from mlit_edge.model.mae import MMLiT
from mlit_edge.model.config import MAEConfig
from mlit_edge.model.mlit import MLiT
from mlit_edge.train.checkpoint import load_checkpoint, make_checkpoint, read_checkpoint, save_atomic
from mlit_edge.train.export_weights import export_weights
from mlit_edge.train.weights_file import WeightsError, is_safetensors
from tests.helpers import run_cli

META = {"name": "toy", "classes": list("abcde"), "mean": [0.5] * 3, "std": [0.25] * 3, "img_size": 12}


def _ckpt(tmp_path, model, cfg, kind="mlit"):
    path = tmp_path / "checkpoint.pt"
    save_atomic(make_checkpoint(kind, model, cfg, None, META, epoch=7, metrics={"test": {"acc": 0.5}},
                                optimizer={"state": {}}), path)
    return path


@pytest.mark.parametrize("kind", ["mlit", "mmlit"])
def test_a_pair_loads_bit_identical_without_torch_load(tmp_path, monkeypatch, tiny_cfg, kind):
    torch.manual_seed(0)
    cfg = tiny_cfg if kind == "mlit" else MAEConfig(encoder=tiny_cfg.replace(num_classes=0), dec_dim=16, dec_heads=4,
                                                    dec_groups=2, dec_hidden=8)
    model = MLiT(cfg) if kind == "mlit" else MMLiT(cfg)
    config = export_weights(str(_ckpt(tmp_path, model, cfg, kind)), tmp_path / "shared")
    weights = tmp_path / "shared" / "model.safetensors"
    assert is_safetensors(weights.read_bytes()) and config["provenance"]["checkpoint_sha256"] == read_checkpoint(
        tmp_path / "checkpoint.pt")[1]
    assert "optimizer" not in json.loads((tmp_path / "shared" / "config.json").read_text())

    def refuse(*args, **kwargs):
        raise AssertionError("torch.load was called on a weights pair")

    monkeypatch.setattr(torch, "load", refuse)
    ckpt = load_checkpoint(weights, kind=kind)
    state = model.state_dict()
    assert ckpt["model"].keys() == state.keys() and ckpt["epoch"] == 7 and ckpt["data"] == META
    for k, v in state.items():
        assert v.dtype == ckpt["model"][k].dtype and v.numpy().tobytes() == ckpt["model"][k].numpy().tobytes(), k


def test_a_changed_or_mismatched_pair_is_refused_in_one_line(tmp_path, tiny_cfg):
    torch.manual_seed(0)
    export_weights(str(_ckpt(tmp_path, MLiT(tiny_cfg), tiny_cfg)), tmp_path / "a")
    weights = tmp_path / "a" / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-5] ^= 0x01
    weights.write_bytes(bytes(data))
    with pytest.raises(WeightsError, match="does not match the sha256 its config.json records") as err:
        load_checkpoint(weights)
    assert "\n" not in str(err.value)
    (tmp_path / "a" / "config.json").write_text('{"format": "something-else"}')
    with pytest.raises(WeightsError, match="not an mlit-edge weights config"):
        load_checkpoint(weights)
    (tmp_path / "a" / "config.json").unlink()
    with pytest.raises(WeightsError, match="no config.json beside it"):
        load_checkpoint(weights)
    with pytest.raises(FileExistsError, match="already holds model.safetensors, README.md; pass --force"):
        export_weights(str(tmp_path / "checkpoint.pt"), tmp_path / "a")


def test_export_weights_command_writes_the_pair(tmp_path, tiny_cfg):
    """`mlit-edge export-weights CKPT --out DIR`, and the refused second run in one line."""
    _ckpt(tmp_path, MLiT(tiny_cfg), tiny_cfg)
    args = ["export-weights", tmp_path / "checkpoint.pt", "--out", tmp_path / "w"]
    run_cli(*args)
    assert sorted(p.name for p in (tmp_path / "w").iterdir()) == ["README.md", "config.json", "model.safetensors"]
    again = run_cli(*args, check=False)
    assert again.returncode == 1 and again.stderr.count("\n") == 1 and "--force" in again.stderr
