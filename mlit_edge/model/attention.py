"""Grouped-query attention: H query heads in G groups, each group sharing one key and value head.

GQA-1 is multi-query attention, GQA-H is multi-head attention. [paper] no bias on any projection.
Letters: B batch, N tokens, D embedding size, H query heads, G key/value heads, C head size.
"""
from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor, nn


class Attention(nn.Module):
    """Bias-free grouped-query self-attention."""

    def __init__(self, dim: int, heads: int, groups: int, attn_dropout: float = 0.0) -> None:
        super().__init__()
        if dim % heads or heads % groups:
            raise ValueError(f"need heads | dim and groups | heads, got dim={dim} heads={heads} groups={groups}")
        self.heads, self.groups, self.head_dim = heads, groups, dim // heads
        self.q = nn.Linear(dim, dim, bias=False)
        self.k = nn.Linear(dim, groups * self.head_dim, bias=False)
        self.v = nn.Linear(dim, groups * self.head_dim, bias=False)
        self.proj = nn.Linear(dim, dim, bias=False)
        self.attn_dropout = attn_dropout

    def forward(self, x: Tensor) -> Tensor:
        B, N, D = x.shape
        H, G, C = self.heads, self.groups, self.head_dim
        q = self.q(x).view(B, N, H, C).transpose(1, 2)  # (B, H, N, C)
        k = self.k(x).view(B, N, G, C).transpose(1, 2)  # (B, G, N, C)
        v = self.v(x).view(B, N, G, C).transpose(1, 2)  # (B, G, N, C)
        # Query head h reads key/value head h // (H/G): consecutive heads form a group.
        k = k.repeat_interleave(H // G, dim=1)  # (B, H, N, C)
        v = v.repeat_interleave(H // G, dim=1)  # (B, H, N, C)
        drop = self.attn_dropout if self.training else 0.0
        out = F.scaled_dot_product_attention(q, k, v, dropout_p=drop)  # (B, H, N, C)
        return self.proj(out.transpose(1, 2).reshape(B, N, D))  # (B, N, D)
