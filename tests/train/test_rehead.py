"""Re-headed pretrained models (issue 50, item 5): `create_model(size, pretrained=..., num_classes=N)` and
`mlit-edge train --checkpoint CKPT [--num-classes N]` keep the pretrained body (an mmLiT's encoder) and start a
fresh head, with one logged notice; the head's classes are the data's."""
import logging
import math

import numpy as np
import pytest
import torch

from mlit_edge import create_model
from mlit_edge.train.checkpoint import load_checkpoint
from mlit_edge.train.data import _make
from mlit_edge.train.fit import build_model
from mlit_edge.train.run_config import RunConfig

NAME = "pretrained:xxs-mnist5k"
MAE = "pretrained:xxs-mnist5k-mae"


def _notices(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if "fresh head" in r.getMessage()]


def _five_classes() -> object:
    """A real ImageSet of 5 classes (10 blank 36x36 images): what build_model reads of the data is its classes."""
    return _make("five", "imagefolder", np.zeros((10, 36, 36, 3), np.uint8), np.arange(10) % 5, list("abcde"))


def test_a_pretrained_classifier_keeps_its_body_under_a_fresh_head(caplog):
    caplog.set_level(logging.INFO, logger="mlit_edge")
    model = create_model("xxs", pretrained=True, num_classes=5)
    shipped = load_checkpoint(NAME)["model"]
    state = model.state_dict()
    assert model.cfg.num_classes == 5 and state["head.weight"].shape == (5, 108) and not model.training
    assert all(torch.equal(v, shipped[k]) for k, v in state.items() if not k.startswith("head."))
    assert not torch.equal(state["head.weight"], shipped["head.weight"][:5])
    # nn.Linear's own initialisation: uniform within 1/sqrt(fan_in), which the trained head leaves
    assert state["head.weight"].abs().max() <= 1 / math.sqrt(108) < shipped["head.weight"].abs().max()
    assert len(_notices(caplog)) == 1 and "fresh head of 5 outputs" in _notices(caplog)[0]
    caplog.clear()
    same = create_model("xxs", pretrained=True, num_classes=10)  # as many classes: its own head, no notice
    assert torch.equal(same.state_dict()["head.weight"], shipped["head.weight"]) and not _notices(caplog)


def test_the_mae_gives_its_encoder(caplog):
    caplog.set_level(logging.INFO, logger="mlit_edge")
    model = create_model("xxs", pretrained="xxs-mnist5k-mae", num_classes=5)
    shipped = load_checkpoint(MAE)["model"]
    assert model.cfg.num_classes == 5 and model.head.weight.shape == (5, 108)
    assert all(torch.equal(v, shipped[f"encoder.{k}"]) for k, v in model.state_dict().items()
               if not k.startswith("head."))
    assert len(_notices(caplog)) == 1 and "decoder is dropped" in _notices(caplog)[0]


def test_what_a_pretrained_model_still_refuses():
    with pytest.raises(ValueError, match="top_k cannot change a pretrained model's config; only num_classes"):
        create_model("xxs", pretrained=True, num_classes=5, top_k=1)
    with pytest.raises(ValueError, match=r"num_classes=-1: give the number of classes"):
        create_model("xxs", pretrained=True, num_classes=-1)
    assert create_model("xxs", num_classes=5).cfg.num_classes == 5  # no pretrained: a new model, no re-heading


def test_train_from_a_checkpoint_builds_the_reheaded_model_named_by_the_data(caplog, tmp_path):
    caplog.set_level(logging.INFO, logger="mlit_edge")
    data = _five_classes()
    run = RunConfig.for_task("train", None, init_from=NAME, num_classes=5, out=str(tmp_path / "run"))
    assert run.size == "xxs"  # the checkpoint's own
    model, kind, cfg, size = build_model(run, data)
    shipped = load_checkpoint(NAME)["model"]
    assert (kind, size, cfg.num_classes) == ("mlit", "xxs", 5) and len(_notices(caplog)) == 1
    assert all(torch.equal(v, shipped[k]) for k, v in model.state_dict().items() if not k.startswith("head."))
    with pytest.raises(ValueError, match="--size s: the --checkpoint is of size xxs; leave --size out"):
        RunConfig.for_task("train", "s", init_from=NAME)


def test_num_classes_must_be_the_datas_count_with_or_without_a_checkpoint(tmp_path):
    data = _five_classes()
    for init_from in (None, NAME):
        run = RunConfig.for_task("train", None if init_from else "xxs", init_from=init_from, num_classes=7,
                                 out=str(tmp_path / "run"))
        with pytest.raises(ValueError, match=r"--num-classes 7: five has 5 classes"):
            build_model(run, data)
    with pytest.raises(ValueError, match="pre-training builds no head"):
        RunConfig(task="pretrain", num_classes=5)
