"""The pretrained models that ship in the package (the mLiT classifier and the mmLiT auto-encoder, each a
model.safetensors + config.json pair): listed, loaded with both sha256s checked and without torch.load, refused
when either file is changed, `create_model(..., pretrained=...)`, and
`--random-weights` beside them (README, "Pretrained models")."""
import json
import shutil

import pytest

from mlit_edge.train import pretrained
from mlit_edge.train.checkpoint import load_checkpoint, read_checkpoint
from tests.helpers import run_cli

NAME = "pretrained:xxs-mnist5k"
MAE = "pretrained:xxs-mnist5k-mae"


def test_the_shipped_model_is_listed_small_and_accurate():
    entry = pretrained.entry_of(NAME)
    path = pretrained.WEIGHTS / entry["file"]
    assert path.stat().st_size == entry["bytes"] <= 3.2e6 and entry["top1"] >= 0.98 and entry["test_images"] == 1000
    assert entry["command"].startswith("mlit-edge train") and len(entry["expert_shares"]) == 9
    assert pretrained.default_for("xxs") == NAME and pretrained.default_for("xxs", num_classes=100) is None
    ckpt, sha = read_checkpoint(NAME, kind="mlit")
    assert sha == entry["sha256"] and ckpt["size"] == "xxs" and "optimizer" not in ckpt  # weights only
    proc = run_cli("pretrained")
    assert NAME in proc.stdout and "mlit-edge train" in proc.stdout


def test_the_shipped_mmlit_is_listed_small_and_a_whole_auto_encoder():
    """`pretrained:xxs-mnist5k-mae`: made by the project's own `pretrain` on the 4000 training digits without
    their labels, encoder and decoder, weights only; never the default a build takes."""
    entry = pretrained.entry_of(MAE)
    path = pretrained.WEIGHTS / entry["file"]
    assert entry["kind"] == "mmlit" and path.stat().st_size == entry["bytes"] <= 4e6
    assert entry["command"].startswith("mlit-edge pretrain --size xxs") and "--data" not in entry["command"]
    assert entry["train_images"] == 4000 and entry["mask_ratio"] == 0.75 and 0 < entry["final_loss"] < 0.5
    ckpt, sha = read_checkpoint(MAE, kind="mmlit")
    assert sha == entry["sha256"] and "optimizer" not in ckpt and ckpt["metrics"]["train"]["loss"] > 0
    assert any(k.startswith("decoder_blocks.") for k in ckpt["model"]) and ckpt["config"]["encoder"]["dim"] == 108
    assert pretrained.default_for("xxs") == NAME  # a build never picks the auto-encoder
    proc = run_cli("pretrained")
    assert f"{MAE}: mmLiT-XXS masked auto-encoder" in proc.stdout and NAME in proc.stdout
    build = run_cli("export", "--checkpoint", MAE, check=False)
    assert build.returncode != 0 and "a supervised mLiT checkpoint is needed" in build.stderr


def test_create_model_by_size_or_shipped_name():
    import torch

    from mlit_edge import MLiT, MMLiT, create_model

    model = create_model("xxs", pretrained=True)
    assert isinstance(model, MLiT) and not model.training
    shipped = load_checkpoint(NAME)["model"]
    assert all(torch.equal(v, shipped[k]) for k, v in model.state_dict().items())
    mae = create_model("xxs", pretrained="xxs-mnist5k-mae")
    assert isinstance(mae, MMLiT) and mae.encoder.cfg.num_classes == 0
    assert create_model("xxs", num_classes=7).cfg.num_classes == 7  # no pretrained: a new, random mLiT
    with pytest.raises(pretrained.PretrainedError, match="of size 'xxs', not 's'"):
        create_model("s", pretrained="xxs-mnist5k-mae")
    with pytest.raises(pretrained.PretrainedError, match="no pretrained classifier of size 's'"):
        create_model("s", pretrained=True)
    with pytest.raises(ValueError, match="top_k cannot change a pretrained model"):
        create_model("xxs", pretrained=True, top_k=1)  # num_classes alone re-heads it (tests/train/test_rehead.py)


@pytest.mark.parametrize("name", [NAME, MAE])
@pytest.mark.parametrize("changed", ["model.safetensors", "config.json"])
def test_a_changed_weights_or_config_file_is_refused_in_one_line(tmp_path, monkeypatch, name, changed):
    """Both files of a shipped pair are checked against the index: a changed config (another class list, other
    preprocessing) is refused as a changed weights file is, by `pretrained:NAME` and by its path alike."""
    weights = tmp_path / "weights"
    shutil.copytree(pretrained.WEIGHTS, weights)
    monkeypatch.setattr(pretrained, "WEIGHTS", weights)
    monkeypatch.setattr(pretrained, "INDEX", weights / "index.json")
    load_checkpoint(name)  # the intact copy loads
    file = (weights / pretrained.entry_of(name)["file"]).parent / changed
    data = bytearray(file.read_bytes())
    data[len(data) // 2] ^= 0x01
    file.write_bytes(bytes(data))
    for spec in (name, file.parent / "model.safetensors"):
        with pytest.raises(pretrained.PretrainedError, match=f"{changed} does not match its recorded sha256") as err:
            load_checkpoint(spec)
        assert "\n" not in str(err.value)
    with pytest.raises(pretrained.PretrainedError, match="no such pretrained model"):
        load_checkpoint("pretrained:nope")


def test_the_shipped_models_load_without_torch_load(monkeypatch):
    """`pretrained:NAME`, `create_model(..., pretrained=...)` and `finetune --from` read the safetensors pair: the
    pickle loader is never called on that path."""
    from types import SimpleNamespace

    import torch

    from mlit_edge import MLiT, create_model
    from mlit_edge.train import fit, run_config

    def refuse(*args, **kwargs):
        raise AssertionError("torch.load was called on a shipped model")

    monkeypatch.setattr(torch, "load", refuse)
    ckpt, sha = read_checkpoint(NAME, kind="mlit")
    assert sha == pretrained.entry_of(NAME)["sha256"] and ckpt["data"]["classes"] == list("0123456789")
    assert isinstance(create_model("xxs", pretrained=True), MLiT)
    assert create_model("xxs", pretrained="xxs-mnist5k-mae").encoder.cfg.dim == 108
    run = run_config.RunConfig.for_task("finetune", None, init_from=MAE)
    model, kind, cfg, _ = fit.build_model(run, SimpleNamespace(classes=list("0123456789")))
    assert kind == "mlit" and cfg.num_classes == 10 and run_config.encoder_size(MAE) == "xxs"


def test_the_shipped_pairs_record_their_provenance():
    """Each config.json names the checkpoint its weights came from and that file's sha256 (the .pt the model
    shipped as before safetensors), and the weights file's own sha256, which the index repeats."""
    for spec in (NAME, MAE):
        entry = pretrained.entry_of(spec)
        config = json.loads((pretrained.WEIGHTS / entry["file"]).with_name("config.json").read_text())
        assert config["weights"]["sha256"] == entry["sha256"] and config["kind"] == entry.get("kind", "mlit")
        prov = config["provenance"]
        assert prov["checkpoint"].endswith(".pt") and len(prov["checkpoint_sha256"]) == 64
        assert config["data"]["classes"] == entry["classes"] and len(config["data"]["mean"]) == 3


@pytest.mark.slow
def test_random_weights_build_ignores_the_pretrained_model_and_says_so(tmp_path):
    """`--random-weights` keeps the latency-only path, with its warning, and records it. (The default,
    the pretrained weights named and recorded, is checked by tests/engine/test_build.py on the README's
    first build.)"""
    random = run_cli("build", "--size", "xxs", "--precision", "fp32", "--target", "onnxruntime", "--out",
                     tmp_path / "r", "--random-weights")
    assert "weights are RANDOM" in random.stderr and NAME not in random.stderr
    record = json.loads((tmp_path / "r" / "mlit-xxs-fp32-ort.onnx.json").read_text())
    assert record["random_weights"] and record["checkpoint"] is None


@pytest.mark.slow
def test_eval_of_the_pretrained_model_repeats_its_recorded_top1():
    from mlit_edge.train.eval_checkpoint import evaluate_checkpoint

    result = evaluate_checkpoint(NAME)
    assert result["top1"] == pytest.approx(pretrained.entry_of(NAME)["top1"], abs=1e-9)


@pytest.mark.slow
def test_finetune_from_the_shipped_mmlit_on_a_few_labels(tmp_path):
    """The few-label path the README shows: the shipped encoder, 2 labelled digits of each class."""
    import torch

    proc = run_cli("finetune", "--from", MAE, "--labels-per-class", "2", "--subset-seed", "3", "--epochs", "1",
                   "--batch-size", "20", "--no-progress", "--out", tmp_path / "ft")
    assert "final test top-1" in proc.stdout
    ckpt = torch.load(tmp_path / "ft" / "checkpoint.pt", weights_only=True)
    assert ckpt["init_from"] == MAE and ckpt["subset"]["images"] == 20 and ckpt["subset"]["seed"] == 3


def test_finetune_run_folder_is_named_after_the_encoders_size():
    """`finetune --from` names its default run folder after the encoder it starts from, not a placeholder."""
    from mlit_edge.train.run_config import RunConfig

    run = RunConfig.for_task("finetune", None, init_from="pretrained:xxs-mnist5k-mae")
    assert run.out == "runs/finetune-xxs-mnist5k" and run.size == "xxs"


def test_create_model_refuses_what_is_no_size_or_pretrained_spec_in_one_line():
    """Round 3: `create_model("XXS", pretrained=True)` said the size does not ship while `create_model("XXS")`
    worked; `create_model(None)` and `create_model(3)` raised AttributeError; `pretrained=""` gave random weights."""
    from mlit_edge import create_model

    assert create_model("XXS", pretrained=True).cfg == create_model("xxs", pretrained=True).cfg
    for size in (None, 3):
        with pytest.raises(TypeError, match="the size is"):
            create_model(size)
    for spec in ("", 1.5):
        with pytest.raises(ValueError, match="pretrained="):
            create_model("xxs", pretrained=spec)
