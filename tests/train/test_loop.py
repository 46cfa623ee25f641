import math

import pytest
import torch

from mlit_edge.model.mlit import MLiT
from mlit_edge.train.loop import RoutingStats, lr_at, noise_scale_at, param_groups, scaled_lr


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


def _routing(top_i, clean_i=None, noisy_i=None, margin=None, noise_std=None):
    from mlit_edge.model.gating import Routing

    clean_i = top_i if clean_i is None else clean_i
    margin = torch.ones(len(top_i)) if margin is None else margin
    return Routing(None, top_i, None, clean_i, top_i if noisy_i is None else noisy_i, margin, noise_std)


def test_routing_stats_shares_agreement_and_entropy():
    stats = RoutingStats([3, 2])
    stats.update([_routing(torch.tensor([[0, 1], [0, 2]])), _routing(torch.tensor([[0, 1], [1, 0]]))])
    stats.update([_routing(torch.tensor([[0, 1]]), clean_i=torch.tensor([[1, 2]])), _routing(torch.tensor([[1, 0]]))])
    assert stats.fractions() == [[0.5, 0.33333, 0.16667], [0.5, 0.5]]
    s = stats.summary()
    assert s["clean"][0] == [0.33333] * 3 and s["clean"][1] == [0.5, 0.5]
    assert s["agreement"] == [round(2 / 3, 5), 1.0]  # the third token's noisy {0,1} is not its clean {1,2}
    assert s["entropy"] == [1.0, 1.0] and s["gap_noise"] == [None, None]  # even shares; no noise std given
    skewed = RoutingStats([3])
    skewed.update([_routing(torch.tensor([[0, 1], [0, 1], [0, 2]]))])
    p = torch.tensor([3, 2, 1]) / 6
    assert skewed.summary()["entropy"][0] == pytest.approx(float(-(p * p.log()).sum() / math.log(3)), abs=1e-5)


def test_noise_schedules():
    assert noise_scale_at(0, 100, "constant") == noise_scale_at(99, 100, "constant") == 1.0
    assert noise_scale_at(0, 100, "cosine") == 1.0 and noise_scale_at(99, 100, "cosine") == pytest.approx(0.0)
    assert noise_scale_at(50, 101, "cosine") == pytest.approx(0.5)


def test_the_optimizer_is_fused_adamw_with_the_documented_betas_and_the_same_update():
    from mlit_edge.train.loop import make_optimizer

    torch.manual_seed(0)
    a, b = torch.nn.Linear(8, 4), torch.nn.Linear(8, 4)
    b.load_state_dict(a.state_dict())
    fused = make_optimizer(list(a.parameters()), 1e-2, torch.device("cpu"))
    plain = torch.optim.AdamW(b.parameters(), lr=1e-2, betas=(0.9, 0.95))
    assert fused.defaults["fused"] and fused.defaults["betas"] == (0.9, 0.95)
    x = torch.randn(16, 8)
    for _ in range(3):
        for model, opt in ((a, fused), (b, plain)):
            opt.zero_grad()
            model(x).square().mean().backward()
            opt.step()
    for p, q in zip(a.parameters(), b.parameters()):
        torch.testing.assert_close(p, q, atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("amx", [True, False])
def test_auto_mixed_precision_is_bf16_on_a_cpu_only_with_amx(monkeypatch, amx):
    from mlit_edge.train import device

    monkeypatch.setattr(device, "cpu_has_amx", lambda: amx)
    assert device.amp_dtype("auto", torch.device("cpu")) == (torch.bfloat16 if amx else None)
    assert device.amp_dtype("off", torch.device("cpu")) is None
    assert device.amp_dtype("bf16", torch.device("cpu")) == torch.bfloat16
    assert device.amp_dtype("auto", torch.device("cuda")) == torch.float16
