"""The last layer for the dummy token alone: the one exact rewrite both deploy flavours share.

The head reads one token after the last layer: the zero dummy patch (the class token's place). Tokens
meet only in attention, so the last layer needs every token's keys and values but the dummy token's
query alone, and its attention output, residual, norms and MoE for that one token: the same function
at about (N-1)/N less work in that layer. `static.StaticBlock` applies it to the last block of both
flavours, the portable TensorRT graph (`LastTokenAttention` below) and the ONNX Runtime one
(`fused_attention.FusedAttention(last_only=True)`); everything it slices is a static Slice/Gather on
the token axis, so the graph keeps the DESIGN's op rules (no NonZero, Scatter, If or Loop).
Letters: B batch, N tokens, D width, H query heads, G key/value heads, R = H/G, C head size, T = B*N.
"""
from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from ..model.attention import Attention
from .fused_attention import frozen, pad_heads


def dummy_rows(t: Tensor, tokens: int) -> Tensor:
    """The dummy (last) token of each image: (T, D) -> (B, D). One static Gather on the token axis."""
    return t.view(-1, tokens, t.shape[-1])[:, -1]  # (B, N, D) -> (B, D)


class LastTokenAttention(nn.Module):
    """The portable grouped-query attention of the last layer for the dummy token's query alone: K and V of
    all N tokens in one Gemm, Q of one token in another; returns residual + attention(LN(x)) as (B, D).

    Its own weights (the query columns apart from the key/value ones), made from the training `Attention`
    as `static.StaticAttention` makes its fused QKV columns: a query projection of the other N-1 tokens
    would only be thrown away. `pad_to`: each head's Q, K and V zero-padded to this size, as StaticAttention
    pads them (`fused_attention.pad_heads`; the scale stays 1/sqrt(C))."""

    def __init__(self, attn: Attention, tokens: int, pad_to: int | None = None) -> None:
        super().__init__()
        H, G, C = attn.heads, attn.groups, attn.head_dim
        P = pad_to or C
        self.N, self.G, self.R, self.C = tokens, G, H // G, P
        wq, wk, wv = attn.split_weights()  # (H*C, D), (G*C, D), (G*C, D)
        bq, bk, bv = attn.split_biases()

        def per_group(k: Tensor, v: Tensor) -> Tensor:  # [k, v] of each group, padded: one view splits them
            k, v = pad_heads(k, G, C, P), pad_heads(v, G, C, P)
            return torch.cat([t for g in range(G) for t in (k[g * P:(g + 1) * P], v[g * P:(g + 1) * P])])

        root = math.sqrt(C)  # divided, as StaticAttention does: the same query weights to the bit
        self.w_q = frozen(pad_heads(wq / root, H, C, P).t())  # (D, H*P)
        self.w_kv = frozen(per_group(wk, wv).t())  # (D, G*2*P)
        has_bias = attn.qkv.bias is not None
        self.b_q = frozen(pad_heads(bq / root, H, C, P)) if has_bias else None
        self.b_kv = frozen(per_group(bk, bv)) if has_bias else None
        self.w_proj = frozen(pad_heads(attn.proj.weight.t(), H, C, P))  # (H*P, D): padded columns meet zero rows
        self.b_proj = frozen(attn.proj.bias) if attn.proj.bias is not None else None

    @staticmethod
    def _linear(x: Tensor, w: Tensor, b: Tensor | None) -> Tensor:
        return x @ w if b is None else torch.addmm(b, x, w)

    def forward(self, h: Tensor, residual: Tensor, last_only: bool = True) -> Tensor:
        """h (T, D) of every token, residual (B, D) of the dummy token -> (B, D)."""
        N, G, R, C = self.N, self.G, self.R, self.C
        q = self._linear(dummy_rows(h, N), self.w_q, self.b_q).view(-1, G, R, 1, C)  # (B, G, R, 1, C)
        kv = self._linear(h, self.w_kv, self.b_kv).view(-1, N, G, 2, C).permute(0, 2, 3, 1, 4)  # (B, G, 2, N, C)
        k, v = kv.split([1, 1], dim=2)  # (B, G, 1, N, C) x2
        attn = (q @ k.transpose(-1, -2)).softmax(dim=-1)  # (B, G, R, 1, N): R heads against one K
        out = (attn @ v).reshape(-1, G * R * C)  # (B, D), heads in order g*R + r
        if self.b_proj is not None:
            residual = residual + self.b_proj
        return torch.addmm(residual, out, self.w_proj)  # (B, D)
