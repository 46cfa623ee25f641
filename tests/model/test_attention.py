import math

import pytest
import torch
from torch import nn

from mlit_edge.model.attention import Attention


def test_gqa_with_g_equal_h_matches_pytorch_multihead_attention():
    D, H = 24, 4
    attn = Attention(D, H, groups=H).eval()
    mha = nn.MultiheadAttention(D, H, bias=False, batch_first=True).eval()
    with torch.no_grad():
        mha.in_proj_weight.copy_(attn.qkv.weight)  # G = H: the fused rows are q, k, v as MHA stacks them
        mha.out_proj.weight.copy_(attn.proj.weight)
    x = torch.randn(3, 10, D)
    expected, _ = mha(x, x, x, need_weights=False)
    torch.testing.assert_close(attn(x), expected, atol=1e-6, rtol=1e-5)


def reference_gqa(attn: Attention, x: torch.Tensor) -> torch.Tensor:
    """Loops over query heads; head h reads key/value head h // (H / G)."""
    H, G, C = attn.heads, attn.groups, attn.head_dim
    wq, wk, wv = attn.split_weights()
    q, k, v = x @ wq.t(), x @ wk.t(), x @ wv.t()
    outs = []
    for h in range(H):
        g = h // (H // G)
        qh, kh, vh = q[..., h * C:(h + 1) * C], k[..., g * C:(g + 1) * C], v[..., g * C:(g + 1) * C]
        weights = torch.softmax(qh @ kh.transpose(-1, -2) / math.sqrt(C), dim=-1)
        outs.append(weights @ vh)
    return attn.proj(torch.cat(outs, dim=-1))


@pytest.mark.parametrize("groups", [1, 2, 3, 6])
def test_gqa_matches_loop_reference(groups):
    attn = Attention(36, 6, groups).eval()
    x = torch.randn(2, 7, 36)
    torch.testing.assert_close(attn(x), reference_gqa(attn, x), atol=1e-6, rtol=1e-5)


def test_mqa_has_one_kv_head_and_no_biases():
    attn = Attention(36, 6, 1)
    wq, wk, wv = attn.split_weights()
    assert wq.shape == (36, 36) and wk.shape == (6, 36) and wv.shape == (6, 36)
    assert attn.qkv.bias is None and attn.proj.bias is None


def test_a_checkpoint_with_separate_q_k_v_loads_into_the_fused_projection():
    """Checkpoints written before the projections were fused still load, and compute the same."""
    attn = Attention(36, 6, 3).eval()
    wq, wk, wv = (w.clone() for w in attn.split_weights())
    old = {"q.weight": wq, "k.weight": wk, "v.weight": wv, "proj.weight": attn.proj.weight.clone()}
    again = Attention(36, 6, 3).eval()
    again.load_state_dict(old)
    x = torch.randn(2, 7, 36)
    assert torch.equal(again(x), attn(x))


def test_groups_must_divide_heads():
    with pytest.raises(ValueError, match="groups"):
        Attention(36, 6, 4)


@pytest.mark.parametrize("groups", [1, 2, 3, 6])
def test_grouped_matmul_attention_is_the_kernel_s_attention(groups):
    """The two-matmul form that compiled CPU bf16 training uses computes what the kernel computes."""
    from mlit_edge.model.attention import _grouped_matmul_attention

    q, k, v = torch.randn(2, 6, 7, 5), torch.randn(2, groups, 7, 5), torch.randn(2, groups, 7, 5)
    expected = torch.nn.functional.scaled_dot_product_attention(q, k, v, enable_gqa=groups != 6)
    torch.testing.assert_close(_grouped_matmul_attention(q, k, v, 0.0, False), expected, atol=1e-6, rtol=1e-5)


def test_cpu_bf16_autocast_runs_the_attention_kernel_in_fp32():
    """Under CPU bf16 autocast the projections are bf16 but the attention itself is fp32: the result is
    as close to the fp32 reference as bf16 projections allow, and gradients reach every weight."""
    attn = Attention(36, 6, 3).eval()
    x = torch.randn(2, 7, 36)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = attn(x)
    assert out.dtype == torch.bfloat16
    torch.testing.assert_close(out.float(), reference_gqa(attn, x), atol=3e-2, rtol=3e-2)
    out.float().square().sum().backward()
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in attn.parameters())


def test_compiled_cpu_bf16_attention_takes_the_two_matmul_form(monkeypatch):
    """Under torch.compile with CPU bf16 autocast the attention is traced through the two-matmul form (the
    fast one there), and computes the reference within bf16's precision."""
    import mlit_edge.model.attention as attention

    traced = []
    real = attention._grouped_matmul_attention
    monkeypatch.setattr(attention, "_grouped_matmul_attention", lambda *a: traced.append(1) or real(*a))
    torch._dynamo.reset()
    attn = Attention(24, 4, 2).eval()
    x = torch.randn(2, 5, 24)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = torch.compile(attn, backend="aot_eager")(x)  # dynamo traces it; no C++ build needed
    assert traced and out.dtype == torch.bfloat16
    torch.testing.assert_close(out.float(), reference_gqa(attn, x), atol=3e-2, rtol=3e-2)
