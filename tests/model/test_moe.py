import itertools

import pytest
import torch
import torch.nn.functional as F

from mlit_edge.model.gating import softmax_k
from mlit_edge.model.moe import MoE, SwiGLUExperts

ARRANGEMENTS = [s for r in range(4) for s in itertools.combinations(("w", "v", "w2"), r)]


def _routing(tokens, experts, k):
    return softmax_k(torch.randn(tokens, experts, dtype=torch.float64), k)


@pytest.mark.parametrize("shared", ARRANGEMENTS)
def test_folded_dense_form_equals_per_expert_sum(shared):
    """The identity behind the deploy graph: sum_e g_e E_e(x) computed densely, checked in float64."""
    ex = SwiGLUExperts(12, 7, 4, shared).double()
    x = torch.randn(40, 12, dtype=torch.float64)
    gates, top_i = _routing(40, 4, 2)
    reference = sum(gates[:, e : e + 1] * ex.expert(x, e) for e in range(4))
    torch.testing.assert_close(ex(x, gates), reference, atol=1e-12, rtol=0)
    torch.testing.assert_close(ex.forward_sparse(x, gates, top_i), reference, atol=1e-12, rtol=0)


def test_expert_is_swiglu_with_shared_v_w2():
    ex = SwiGLUExperts(6, 5, 3, ("v", "w2"))
    x = torch.randn(9, 6)
    for e in range(3):
        manual = (F.silu(x @ ex.w[:, e] + ex.b[e]) * (x @ ex.v[:, 0] + ex.c[0])) @ ex.w2[0] + ex.d[0]
        torch.testing.assert_close(ex.expert(x, e), manual)


@pytest.mark.parametrize("shared,expected", [
    (("v", "w2"), 3 * (6 * 5 + 5) + (6 * 5 + 5) + (5 * 6 + 6)),
    ((), 3 * ((6 * 5 + 5) * 2 + 5 * 6 + 6)),
    (("w", "v", "w2"), (6 * 5 + 5) * 2 + 5 * 6 + 6),
])
def test_sharing_changes_parameter_count(shared, expected):
    assert sum(p.numel() for p in SwiGLUExperts(6, 5, 3, shared).parameters()) == expected


def test_init_matches_pytorch_linear_bounds():
    ex = SwiGLUExperts(100, 10, 3)
    assert ex.w.abs().max() <= 0.1 and ex.w.abs().max() > 0.09  # U(-1/sqrt(100), 1/sqrt(100))
    assert ex.w2.abs().max() <= 10**-0.5


def test_moe_layer_dense_matches_sparse_and_keeps_shape():
    moe = MoE(16, 8, 5, k=2).eval()
    x = torch.randn(2, 11, 16)
    dense, r1 = moe(x)
    sparse, r2 = moe(x, sparse=True)
    assert dense.shape == (2, 11, 16) and r1.top_i.shape == (22, 2)
    torch.testing.assert_close(dense, sparse, atol=1e-5, rtol=0)
    assert torch.equal(r1.top_i, r2.top_i)


def test_unrouted_expert_gets_zero_gradient_in_dense_form():
    """Dense compute must not leak gradient into experts that no token chose."""
    ex = SwiGLUExperts(8, 4, 3)
    gates = torch.zeros(10, 3)
    gates[:, 0], gates[:, 1] = 0.7, 0.3  # expert 2 unused
    ex(torch.randn(10, 8), gates).sum().backward()
    assert ex.w.grad[:, 2].abs().max() == 0 and ex.b.grad[2].abs().max() == 0
    assert ex.w.grad[:, 0].abs().max() > 0
