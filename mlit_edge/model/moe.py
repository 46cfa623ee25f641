"""Mixture of SwiGLU experts whose V and W2 are shared across the layer.

Expert e computes (silu(x W_e + b_e) * (x V_e + c_e)) W2_e + d_e. Each of W, V, W2 (with its bias)
is either per-expert or one shared copy: a shared matrix is stored with an expert axis of length 1
and broadcast, so every sharing arrangement of the paper's Table 9 runs through the same code.

Letters: T tokens, M embedding size, E experts, K chosen experts, H hidden size (of one expert).
"""
from __future__ import annotations

import math
from typing import Iterable

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .gating import NoisyTopKGate, Routing


def mix_experts(a: Tensor, u: Tensor, gates: Tensor) -> Tensor:
    """sum_e g_e * silu(a_e) * u_e for a (T, n_w, H), u (T, n_v, H), gates (T, 1, E), where a branch with
    one entry is shared by all experts; returns (T, 1, H). Exact because a token's gates sum to 1: a
    shared branch comes out of the sum, so the paper's shared V multiplies once, after the mixing."""
    experts, n_w, n_v = gates.shape[-1], a.shape[1], u.shape[1]
    if n_w == experts and n_v == 1:  # the paper's sharing
        return (gates @ F.silu(a)) * u
    if n_w == 1 and n_v == experts:
        return F.silu(a) * (gates @ u)
    if n_w == 1:  # both shared
        return F.silu(a) * u
    return gates @ (F.silu(a) * u)  # both per expert


def _linear_init_(weight: Tensor, bias: Tensor, fan_in: int) -> None:
    """PyTorch's default nn.Linear init (the paper keeps PyTorch defaults): U(-1/sqrt(fan_in), +)."""
    bound = 1.0 / math.sqrt(fan_in)
    nn.init.uniform_(weight, -bound, bound)
    nn.init.uniform_(bias, -bound, bound)


class SwiGLUExperts(nn.Module):
    """E SwiGLU experts; `shared` names which of "w", "v", "w2" exist once for the whole layer."""

    def __init__(self, dim: int, hidden: int, experts: int, shared: Iterable[str] = ("v", "w2")) -> None:
        super().__init__()
        shared = set(shared)
        self.dim, self.hidden, self.experts = dim, hidden, experts
        n_w, n_v, n_w2 = (1 if name in shared else experts for name in ("w", "v", "w2"))
        # Stored so that the per-expert maps flatten to one matmul without a copy:
        # W and V as (M, E, H) -> (M, E*H); W2 as (E, H, M) -> (E*H, M).
        self.w = nn.Parameter(torch.empty(dim, n_w, hidden))
        self.b = nn.Parameter(torch.empty(n_w, hidden))
        self.v = nn.Parameter(torch.empty(dim, n_v, hidden))
        self.c = nn.Parameter(torch.empty(n_v, hidden))
        self.w2 = nn.Parameter(torch.empty(n_w2, hidden, dim))
        self.d = nn.Parameter(torch.empty(n_w2, dim))
        for e in range(n_w):
            _linear_init_(self.w[:, e].data, self.b[e].data, dim)
        for e in range(n_v):
            _linear_init_(self.v[:, e].data, self.c[e].data, dim)
        for e in range(n_w2):
            _linear_init_(self.w2[e].data, self.d[e].data, hidden)

    def in_proj(self) -> tuple[Tensor, Tensor]:
        """Every expert's W and V side by side, (M, (n_w + n_v) * H), and their biases: one matmul."""
        return (torch.cat([self.w.reshape(self.dim, -1), self.v.reshape(self.dim, -1)], dim=1),
                torch.cat([self.b.reshape(-1), self.c.reshape(-1)]))

    def forward(self, x: Tensor, gates: Tensor) -> Tensor:
        """sum_e g_e * expert_e(x) for x (T, M) and gates (T, E) with rows summing to 1.

        All experts' W and V run as one matmul; a shared V or W2 runs once for all experts. With W2
        shared, sum_e g_e (z_e W2 + d) = (sum_e g_e z_e) W2 + d because the gates sum to 1.
        """
        n_w, n_w2 = self.w.shape[1], self.w2.shape[0]
        weight, bias = self.in_proj()
        a, u = torch.addmm(bias, x, weight).view(-1, n_w + self.v.shape[1], self.hidden).split(
            [n_w, self.v.shape[1]], dim=1)  # (T, n_w, H), (T, n_v, H)
        if n_w2 == 1:
            return mix_experts(a, u, gates.unsqueeze(1)).squeeze(1) @ self.w2[0] + self.d[0]
        z = gates.unsqueeze(-1) * (F.silu(a) * u)  # (T, E, H): each expert's term, weighted
        return z.reshape(-1, self.experts * self.hidden) @ self.w2.view(-1, self.dim) + gates @ self.d

    def expert(self, x: Tensor, e: int) -> Tensor:
        """Expert e alone on x (T, M) -> (T, M)."""
        pick = lambda p, axis: p.select(axis, e if p.shape[axis] > 1 else 0)  # noqa: E731
        a = F.silu(x @ pick(self.w, 1) + pick(self.b, 0))
        u = x @ pick(self.v, 1) + pick(self.c, 0)
        return (a * u) @ pick(self.w2, 0) + pick(self.d, 0)

    def forward_sparse(self, x: Tensor, gates: Tensor, top_i: Tensor) -> Tensor:
        """Reference per-expert dispatch: each expert runs only on the tokens routed to it.

        Data-dependent shapes, so it is for parity checks and benchmarks, never for export.
        """
        out = x.new_zeros(x.shape[0], self.dim)
        for e in range(self.experts):
            rows = (top_i == e).any(dim=-1).nonzero().squeeze(-1)  # tokens that chose e
            if rows.numel():
                out.index_add_(0, rows, gates[rows, e : e + 1] * self.expert(x[rows], e))
        return out


class MoE(nn.Module):
    """A mixture-of-experts feed-forward layer: gate, SwiGLU experts, dropout on the output."""

    def __init__(self, dim: int, hidden: int, experts: int, k: int = 2, shared: Iterable[str] = ("v", "w2"),
                 noisy: bool = True, noise_eps: float = 1e-2, balance: str = "cv", w_importance: float = 1e-2,
                 w_load: float = 1e-2, dropout: float = 0.0, gate_init: str = "default") -> None:
        super().__init__()
        self.gate = NoisyTopKGate(dim, experts, k, noisy, noise_eps, balance, w_importance, w_load, gate_init)
        self.experts = SwiGLUExperts(dim, hidden, experts, shared)
        self.drop = nn.Dropout(dropout)

    def forward(self, x: Tensor, sparse: bool = False) -> tuple[Tensor, Routing]:
        """x (B, N, M) -> (B, N, M) and the routing of its B*N tokens; `sparse` uses the reference."""
        B, N, M = x.shape
        flat = x.reshape(B * N, M)  # (T, M)
        routing = self.gate(flat)
        if sparse:
            y = self.experts.forward_sparse(flat, routing.gates, routing.top_i)
        else:
            y = self.experts(flat, routing.gates)
        return self.drop(y).view(B, N, M), routing
