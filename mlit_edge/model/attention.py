"""Grouped-query attention: H query heads in G groups, each group sharing one key and value head.

GQA-1 is multi-query attention, GQA-H is multi-head attention. [reading] no bias on the projections by
default (`MLiTConfig.attn_bias` gives QKV and the output projection one: docs/model.md weighs both readings).
[ours] Q, K and V come from one fused projection, and PyTorch's attention kernel reads each group's
key/value head for its H/G query heads itself (`enable_gqa`), so repeated K/V heads are never
materialised; both are exactly the paper's separate projections and repeated heads.
Under bf16 autocast on a CPU, PyTorch's CPU attention kernel is several times slower in bf16 than in
fp32 (its backward most), so it runs in fp32 there; under torch.compile two plain matmuls
(`_grouped_matmul_attention`) are faster still, as bf16 matmuls use AMX and the softmax is fused.
Letters: B batch, N tokens, D embedding size, H query heads, G key/value heads, C head size.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn


def _fuse_qkv_keys(state_dict: dict, prefix: str, *args) -> None:
    """Checkpoints written before the projections were fused hold q, k and v apart: join them."""
    names = [f"{prefix}{p}.weight" for p in ("q", "k", "v")]
    if all(n in state_dict for n in names):
        state_dict[f"{prefix}qkv.weight"] = torch.cat([state_dict.pop(n) for n in names])


class Attention(nn.Module):
    """Grouped-query self-attention, bias-free unless `bias`."""

    def __init__(self, dim: int, heads: int, groups: int, attn_dropout: float = 0.0, bias: bool = False) -> None:
        super().__init__()
        if dim % heads or heads % groups:
            raise ValueError(f"need heads | dim and groups | heads, got dim={dim} heads={heads} groups={groups}")
        self.heads, self.groups, self.head_dim = heads, groups, dim // heads
        # rows: the H query heads, then the G key heads, then the G value heads (C rows each); the
        # same fan-in, so the same init as three separate nn.Linear
        self.qkv = nn.Linear(dim, (heads + 2 * groups) * self.head_dim, bias=bias)
        self.proj = nn.Linear(dim, dim, bias=bias)
        self.attn_dropout = attn_dropout
        self._register_load_state_dict_pre_hook(_fuse_qkv_keys)

    def split_weights(self) -> tuple[Tensor, Tensor, Tensor]:
        """The query (H*C, D), key (G*C, D) and value (G*C, D) projection weights."""
        C = self.head_dim
        return self.qkv.weight.split([self.heads * C, self.groups * C, self.groups * C])

    def split_biases(self) -> tuple[Tensor, Tensor, Tensor]:
        """The query (H*C,), key (G*C,) and value (G*C,) projection biases (zeros when bias-free)."""
        C = self.head_dim
        bias = self.qkv.bias if self.qkv.bias is not None else self.qkv.weight.new_zeros(self.qkv.out_features)
        return bias.split([self.heads * C, self.groups * C, self.groups * C])

    def forward(self, x: Tensor) -> Tensor:
        B, N, D = x.shape
        H, G, C = self.heads, self.groups, self.head_dim
        q, k, v = self.qkv(x).split([H * C, G * C, G * C], dim=-1)  # (B, N, H*C), (B, N, G*C) x2
        q = q.view(B, N, H, C).transpose(1, 2)  # (B, H, N, C)
        k = k.view(B, N, G, C).transpose(1, 2)  # (B, G, N, C)
        v = v.view(B, N, G, C).transpose(1, 2)  # (B, G, N, C)
        drop = self.attn_dropout if self.training else 0.0
        cpu_autocast = x.device.type == "cpu" and torch.is_autocast_enabled("cpu")
        if cpu_autocast and torch.compiler.is_compiling():
            out = _grouped_matmul_attention(q, k, v, drop, self.training)  # bf16 matmuls, a fused softmax
        elif cpu_autocast:
            with torch.autocast("cpu", enabled=False):
                out = F.scaled_dot_product_attention(q.float(), k.float(), v.float(), dropout_p=drop,
                                                     enable_gqa=G != H).to(q.dtype)
        else:
            # query head h reads key/value head h // (H/G): consecutive heads form a group
            out = F.scaled_dot_product_attention(q, k, v, dropout_p=drop, enable_gqa=G != H)  # (B, H, N, C)
        return self.proj(out.transpose(1, 2).reshape(B, N, D))  # (B, N, D)


def _grouped_matmul_attention(q: Tensor, k: Tensor, v: Tensor, drop: float, training: bool) -> Tensor:
    """softmax(q k^T / sqrt(C)) v for q (B, H, N, C) and k, v (B, G, N, C) as two matmuls, the H/G query
    heads of a group stacked along the sequence so that each matmul meets its key/value head once.
    The softmax runs in fp32. Exactly what `scaled_dot_product_attention(..., enable_gqa=True)` computes."""
    B, H, N, C = q.shape
    G = k.shape[1]
    q = (q * C**-0.5).reshape(B, G, (H // G) * N, C)  # head h = g * (H/G) + r, so its rows stay in group g
    attn = (q @ k.transpose(-1, -2)).float().softmax(dim=-1).to(v.dtype)  # (B, G, R*N, N)
    attn = F.dropout(attn, drop, training) if drop else attn
    return (attn @ v).view(B, H, N, C)  # (B, H, N, C)
