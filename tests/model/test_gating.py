import math

import pytest
import torch

from mlit_edge.model.gating import NoisyTopKGate, coefficient_of_variation, prob_in_top_k, psi, softmax_k

# The paper's worked example (Section 2.1.2), k = 2.
H = torch.tensor([[4.4742, -5.6365, 6.8226, 0.9960],
                  [3.5298, 2.3049, 1.2113, -1.3946],
                  [-2.2414, 0.3925, 1.6676, -1.9253]])
PSI = torch.tensor([[0.9960, 4.4742, 0.9960, 4.4742],
                    [1.2113, 1.2113, 2.3049, 2.3049],
                    [0.3925, -1.9253, -1.9253, 0.3925]])


def test_psi_reproduces_papers_worked_example():
    assert torch.equal(psi(H, 2), PSI)


def test_softmax_k_hand_checked():
    gates, top_i = softmax_k(torch.tensor([[1.0, 2.0, 3.0, 0.0]]), 2)
    e = math.e
    expected = torch.tensor([[0.0, 1 / (1 + e), e / (1 + e), 0.0]])  # softmax over {3, 2}
    torch.testing.assert_close(gates, expected)
    assert top_i.tolist() == [[2, 1]]


def test_softmax_k_rows_sum_to_one_with_k_nonzeros():
    gates, _ = softmax_k(torch.randn(50, 5), 3)
    torch.testing.assert_close(gates.sum(-1), torch.ones(50))
    assert ((gates > 0).sum(-1) == 3).all()


def test_prob_in_top_k_matches_monte_carlo():
    """P(x) is the chance that an expert lands in the top k when only its own noise is redrawn."""
    torch.manual_seed(1)
    clean, std = torch.randn(6, 4), torch.rand(6, 4) + 0.5
    noisy = clean + torch.randn(6, 4) * std
    p = prob_in_top_k(clean, noisy, std, 2)
    draws = 20000
    for c in range(4):
        trial = noisy.unsqueeze(0).repeat(draws, 1, 1)  # (S, T, E)
        trial[..., c] = clean[:, c] + torch.randn(draws, 6) * std[:, c]
        in_top = (trial.topk(2, dim=-1).indices == c).any(-1).float().mean(0)  # (T,)
        torch.testing.assert_close(in_top, p[:, c], atol=0.015, rtol=0)


def test_cv_and_cv_squared():
    x = torch.tensor([1.0, 2.0, 3.0, 6.0])
    cv = x.std(unbiased=False) / x.mean()  # the population std, as Shazeer's cv_squared
    torch.testing.assert_close(coefficient_of_variation(x), cv)
    torch.testing.assert_close(coefficient_of_variation(x, squared=True), cv**2)
    assert coefficient_of_variation(torch.ones(5)) == 0


@pytest.mark.parametrize("noisy", [True, False])
def test_balancing_loss_larger_for_collapsed_routing(noisy):
    torch.manual_seed(0)
    x = torch.randn(512, 16)
    x[:, 0] = 1.0  # a constant feature: a gate that weighs it heavily sends every token the same way
    balanced = NoisyTopKGate(16, 4, k=2, noisy=noisy).train()
    with torch.no_grad():
        balanced.w_gate.weight[:, 0] = 0.0
    collapsed = NoisyTopKGate(16, 4, k=2, noisy=noisy).train()
    with torch.no_grad():
        collapsed.load_state_dict(balanced.state_dict())
        collapsed.w_gate.weight[:, 0] = torch.tensor([20.0, 10.0, -10.0, -20.0])
    loss_b, loss_c = balanced(x).loss, collapsed(x).loss
    assert loss_c > 2 * loss_b
    # collapsed: experts 0 and 1 take every token
    assert set(collapsed(x).top_i.unique().tolist()) == {0, 1}


def test_noise_only_in_training():
    gate = NoisyTopKGate(8, 5, k=2)
    x = torch.randn(64, 8)
    gate.eval()
    clean_top = gate.w_gate(x).topk(2, -1).indices
    assert torch.equal(gate(x).top_i, clean_top)
    gate.train()
    assert not torch.equal(gate(x).gates, gate(x).gates)  # fresh noise each call


def test_gate_loss_has_gradients_for_wg_and_wnoise():
    gate = NoisyTopKGate(8, 4, k=2).train()
    gate(torch.randn(32, 8)).loss.backward()
    assert gate.w_gate.weight.grad.abs().sum() > 0
    assert gate.w_noise.weight.grad.abs().sum() > 0


def test_routing_health_on_a_fixed_input_matches_a_hand_computation():
    from mlit_edge.train.loop import RoutingStats

    gate = NoisyTopKGate(2, 3, k=2)
    with torch.no_grad():
        gate.w_gate.weight.copy_(torch.tensor([[1.0, 0.0], [0.0, 1.0], [0.5, 0.5]]))  # (E, M)
        gate.w_noise.weight.copy_(torch.tensor([[0.0, 0.0], [0.0, 0.0], [1.0, 0.0]]))
    x = torch.tensor([[2.0, 1.0], [0.0, 3.0], [1.0, 1.0]])
    r = gate.eval()(x)
    # clean logits [2, 1, 1.5], [0, 3, 1.5], [1, 1, 1]: margins (2nd - 3rd largest) 0.5, 1.5, 0
    assert torch.equal(r.margin, torch.tensor([0.5, 1.5, 0.0]))
    sp = lambda v: math.log1p(math.exp(v))  # noqa: E731 - softplus
    std = [(2 * sp(0) + sp(x0)) / 3 + 1e-2 for x0 in (2.0, 0.0, 1.0)]  # mean over the experts of softplus + eps
    torch.testing.assert_close(r.noise_std, torch.tensor(std))
    stats = RoutingStats([3])
    stats.update([r])
    assert stats.summary()["gap_noise"] == [round(sorted([0.5 / std[0], 1.5 / std[1], 0.0])[1], 5)]


@pytest.mark.parametrize("noise_off", ["no noise weights", "noise scale 0"])
def test_noisy_and_clean_routing_agree_when_the_noise_is_off(noise_off):
    from mlit_edge.train.loop import RoutingStats, set_noise_scale

    gate = NoisyTopKGate(8, 5, k=2, noisy=noise_off != "no noise weights").train()
    if noise_off == "noise scale 0":
        set_noise_scale(gate, 0.0)
    stats = RoutingStats([5])
    stats.update([gate(torch.randn(300, 8))])
    assert stats.summary()["agreement"] == [1.0]
    loud = NoisyTopKGate(8, 5, k=2).train()  # the paper's noise: some tokens change experts
    stats = RoutingStats([5])
    stats.update([loud(torch.randn(300, 8))])
    assert stats.summary()["agreement"][0] < 1.0


def test_zero_initialised_gates_start_even():
    gate = NoisyTopKGate(8, 4, k=2, init="zero")
    assert not gate.w_gate.weight.any() and not gate.w_noise.weight.any()
