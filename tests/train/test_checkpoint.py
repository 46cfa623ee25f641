import os
import pickle

import pytest
import torch

from mlit_edge.train.checkpoint import (CheckpointError, config_from_dict, config_to_dict, load_checkpoint,
                                  make_checkpoint, model_from_checkpoint, rng_state, save_atomic, set_rng_state)
from mlit_edge.model.config import MAEConfig
from mlit_edge.model.mae import MMLiT
from mlit_edge.model.mlit import MLiT

META = {"name": "mnist5k", "classes": [str(i) for i in range(10)], "mean": [0.1] * 3, "std": [0.3] * 3}


def test_roundtrip_rebuilds_the_same_model(tmp_path, tiny_cfg):
    model = MLiT(tiny_cfg)
    save_atomic(make_checkpoint("mlit", model, tiny_cfg, None, META, epoch=3), tmp_path / "c.pt")
    ckpt = load_checkpoint(tmp_path / "c.pt", kind="mlit")
    again = model_from_checkpoint(ckpt).eval()
    x = torch.randn(2, 3, 12, 12)
    assert torch.equal(again(x), model.eval()(x)) and ckpt["epoch"] == 3
    assert config_from_dict("mlit", config_to_dict(tiny_cfg)) == tiny_cfg


def test_mae_config_roundtrip(tiny_cfg):
    cfg = MAEConfig(encoder=tiny_cfg.replace(num_classes=0), dec_dim=16, dec_heads=4, dec_groups=2)
    assert config_from_dict("mmlit", config_to_dict(cfg)) == cfg


class Exploit:
    def __reduce__(self):
        return (os.system, ("touch pwned_marker",))


def test_malicious_pickle_is_refused_without_running_it(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with open("evil.pt", "wb") as f:
        pickle.dump({"format": "mlit-edge-checkpoint", "model": Exploit()}, f)
    with pytest.raises(CheckpointError, match="not a safe mlit-edge checkpoint"):
        load_checkpoint("evil.pt")
    assert not (tmp_path / "pwned_marker").exists()


def test_foreign_and_wrong_kind_checkpoints_are_refused(tmp_path, tiny_cfg):
    torch.save({"state_dict": {}}, tmp_path / "other.pt")
    with pytest.raises(CheckpointError, match="not an mlit-edge checkpoint"):
        load_checkpoint(tmp_path / "other.pt")
    save_atomic(make_checkpoint("mlit", MLiT(tiny_cfg), tiny_cfg, "xxs", META), tmp_path / "sup.pt")
    with pytest.raises(CheckpointError, match="mmLiT pre-training checkpoint is needed"):
        load_checkpoint(tmp_path / "sup.pt", kind="mmlit")
    with pytest.raises(CheckpointError, match="does not exist"):
        load_checkpoint(tmp_path / "missing.pt")


def test_truncated_file_is_refused(tmp_path, tiny_cfg):
    save_atomic(make_checkpoint("mlit", MLiT(tiny_cfg), tiny_cfg, None, META), tmp_path / "c.pt")
    data = (tmp_path / "c.pt").read_bytes()
    (tmp_path / "c.pt").write_bytes(data[: len(data) // 2])
    with pytest.raises(CheckpointError, match="refused"):
        load_checkpoint(tmp_path / "c.pt")


class _Unpicklable:
    """Fails inside torch.save's pickler, after the temporary file is open, with one known error (a lambda's error
    is AttributeError up to Python 3.13 and PicklingError from 3.14)."""

    def __reduce__(self):
        raise pickle.PicklingError("_Unpicklable cannot be pickled")


def test_failed_save_keeps_the_previous_file(tmp_path):
    save_atomic({"format": "x", "v": 1}, tmp_path / "c.pt")
    with pytest.raises(pickle.PicklingError, match="_Unpicklable cannot be pickled"):  # the pickler's own error, as is
        save_atomic({"v": 2, "bad": _Unpicklable()}, tmp_path / "c.pt")
    assert torch.load(tmp_path / "c.pt", weights_only=True)["v"] == 1
    assert [p.name for p in tmp_path.iterdir()] == ["c.pt"]  # no temporary left behind


def test_rng_state_roundtrips_through_weights_only(tmp_path):
    state = rng_state()
    save_atomic({"rng": state}, tmp_path / "r.pt")
    a = torch.rand(3)
    set_rng_state(torch.load(tmp_path / "r.pt", weights_only=True)["rng"])
    assert torch.equal(torch.rand(3), a)


def test_mae_checkpoint_rebuilds(tmp_path, tiny_cfg):
    cfg = MAEConfig(encoder=tiny_cfg.replace(num_classes=0), dec_dim=16, dec_heads=4, dec_groups=2, dec_hidden=8)
    save_atomic(make_checkpoint("mmlit", MMLiT(cfg), cfg, None, META), tmp_path / "m.pt")
    assert isinstance(model_from_checkpoint(load_checkpoint(tmp_path / "m.pt", kind="mmlit")), MMLiT)


def test_a_fresh_start_cleans_stale_temporaries_and_keeps_the_old_log_aside(tmp_path):
    """What a killed run leaves: hidden temporaries (removed on start), an earlier metrics.jsonl (a fresh
    run keeps it as metrics.N.jsonl rather than appending), a torn last line (skipped on resume)."""
    import json

    from mlit_edge.train.run_folder import clean_start, rewrite_log

    log = tmp_path / "metrics.jsonl"
    for name in (".checkpoint.pt.abc123.tmp", ".loss.png.x.tmp", ".write-test-1", "metrics.jsonl.tmp"):
        (tmp_path / name).write_bytes(b"partial")
    log.write_text(json.dumps({"epoch": 0}) + "\n")
    (tmp_path / "metrics.1.jsonl").write_text("older\n")
    done = clean_start(tmp_path, log, resume=False)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["metrics.1.jsonl", "metrics.2.jsonl"]
    assert len(done) == 5 and (tmp_path / "metrics.2.jsonl").read_text() == '{"epoch": 0}\n'
    log.write_text("".join(json.dumps({"epoch": e}) + "\n" for e in range(3)) + '{"epoch": 3, "tra')
    assert clean_start(tmp_path, log, resume=True) == [] and log.exists()
    assert [r["epoch"] for r in rewrite_log(log, keep_below_epoch=3)] == [0, 1, 2]
    assert log.read_text().splitlines()[-1] == '{"epoch": 2}'


@pytest.mark.slow
def test_a_zip_bomb_checkpoint_is_refused_from_its_declared_sizes(tmp_path, trained_checkpoint):
    import tracemalloc
    import zipfile

    from mlit_edge.train.checkpoint import CheckpointError, load_checkpoint

    _, good = trained_checkpoint
    bomb = tmp_path / "bomb.pt"
    with zipfile.ZipFile(good) as src, zipfile.ZipFile(bomb, "w", zipfile.ZIP_DEFLATED) as dst:
        for r in src.infolist():
            dst.writestr(r.filename, b"\0" * (200 << 20) if r.filename.endswith("data/0") else src.read(r.filename))
    tracemalloc.start()
    with pytest.raises(CheckpointError, match="declare 2.*MiB in a 0.* MiB file, compressed"):
        load_checkpoint(bomb)
    assert tracemalloc.get_traced_memory()[1] < 20 << 20
    tracemalloc.stop()


def test_resume_takes_the_same_image_folder_by_its_absolute_path(tmp_path, monkeypatch):
    """A run started on `--data folder` resumes on `--data /abs/folder` (and the reverse); another folder is not it."""
    from mlit_edge.train.run_folder import same_dataset

    (tmp_path / "folder").mkdir()
    (tmp_path / "other").mkdir()
    monkeypatch.chdir(tmp_path)
    assert same_dataset("imagefolder:folder", f"imagefolder:{tmp_path / 'folder'}")
    assert same_dataset(f"imagefolder:{tmp_path}/./folder", "imagefolder:folder")
    assert not same_dataset("imagefolder:folder", "imagefolder:other") and not same_dataset("mnist5k", "cifar10")
