import math

import pytest
import torch

from mlit_edge.model.mlit import MLiT
from mlit_edge.train.loop import ExpertCounter, lr_at, param_groups, scaled_lr


def test_lr_rule_is_eq4():
    assert scaled_lr(256) == pytest.approx(3e-4) and scaled_lr(128) == pytest.approx(1.5e-4)


def test_lr_schedule_values():
    total, warm, peak = 100, 5, 1e-3
    assert lr_at(0, total, peak, warm) == pytest.approx(2e-4)  # linear warm-up: 1/5 of peak
    assert lr_at(4, total, peak, warm) == pytest.approx(peak)
    assert lr_at(5, total, peak, warm) == pytest.approx(peak)  # cosine starts at the peak
    assert lr_at(5 + 95 // 2, total, peak, warm) == pytest.approx(peak * 0.5 * (1 + math.cos(math.pi * 47 / 95)))
    assert lr_at(100, total, peak, warm, min_lr=1e-5) == pytest.approx(1e-5)
    assert lr_at(10, total, peak, 0) < peak


def test_no_weight_decay_on_biases_norms_and_embeddings(tiny_cfg):
    model = MLiT(tiny_cfg)
    decay, no_decay = param_groups(model, 0.05)
    names = {id(p): n for n, p in model.named_parameters()}
    skipped = {names[id(p)] for p in no_decay["params"]}
    assert "blocks.0.moe.experts.b" in skipped and "pos_embed" in skipped and "norm.weight" in skipped
    assert "blocks.0.moe.experts.w" not in skipped and no_decay["weight_decay"] == 0
    assert decay["weight_decay"] == 0.05


def test_expert_counter_fractions():
    counter = ExpertCounter([3, 2])
    counter.update([torch.tensor([[0, 1], [0, 2]]), torch.tensor([[0, 1], [1, 0]])])
    counter.update([torch.tensor([[0, 1]]), torch.tensor([[1, 0]])])
    assert counter.fractions() == [[0.5, 0.33333, 0.16667], [0.5, 0.5]]
