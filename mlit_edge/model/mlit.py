"""mLiT: a mixture-of-experts lightweight vision transformer, from the leaf layers up.

Letters: B batch, N tokens (144 patches + 1 dummy), D embedding size, P pixels per patch (3*3*3).
"""
from __future__ import annotations

from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .attention import Attention
from .config import MLiTConfig, get_config
from .gating import Routing
from .moe import MoE


def sincos_positions(dim: int, grid: int) -> Tensor:
    """MAE's 2-D sin-cos position table for a grid x grid patch layout in row-major order: (grid*grid, dim).

    As MAE's `get_2d_sincos_pos_embed`, value for value: the first half of the channels encodes the patch's
    column and the second its row (MAE's meshgrid puts w first), each half sin then cos at dim/4 frequencies.
    """
    omega = 1.0 / 10000 ** (torch.arange(dim // 4, dtype=torch.float64) / (dim // 4))  # (dim/4,)
    rows, cols = torch.meshgrid(torch.arange(grid, dtype=torch.float64), torch.arange(grid, dtype=torch.float64),
                                indexing="ij")
    parts = []
    for pos in (cols.flatten(), rows.flatten()):
        angle = pos[:, None] * omega[None]  # (grid*grid, dim/4)
        parts += [angle.sin(), angle.cos()]
    return torch.cat(parts, dim=1).float()


class DropPath(nn.Module):
    """Stochastic depth: drop a residual branch for whole samples during training."""

    def __init__(self, p: float = 0.0) -> None:
        super().__init__()
        self.p = p

    def forward(self, x: Tensor) -> Tensor:
        if self.p == 0.0 or not self.training:
            return x
        keep = x.new_empty(x.shape[0], *([1] * (x.dim() - 1))).bernoulli_(1.0 - self.p)  # (B, 1, 1)
        return x * keep / (1.0 - self.p)


class Block(nn.Module):
    """Pre-norm encoder layer [ours]: x + Attn(LN(x)), then x + MoE(LN(x))."""

    def __init__(self, dim: int, heads: int, groups: int, hidden: int, experts: int, k: int = 2,
                 shared: tuple[str, ...] = ("v", "w2"), drop_path: float = 0.0, attn_bias: bool = False,
                 **moe_kwargs) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(dim)
        self.attn = Attention(dim, heads, groups, bias=attn_bias)
        self.norm2 = nn.LayerNorm(dim)
        self.moe = MoE(dim, hidden, experts, k, shared, **moe_kwargs)
        self.drop_path = DropPath(drop_path)

    def forward(self, x: Tensor, sparse: bool = False) -> tuple[Tensor, Routing]:
        """x (B, N, D) -> x and this layer's routing (over its B*N tokens)."""
        x = x + self.drop_path(self.attn(self.norm1(x)))
        y, routing = self.moe(self.norm2(x), sparse=sparse)
        return x + self.drop_path(y), routing


def moe_options(cfg: MLiTConfig) -> dict:
    """The MoE and gate settings of a config, for the encoder's layers and mmLiT's decoder alike."""
    return dict(noisy=cfg.noisy_gating, noise_eps=cfg.noise_eps, balance=cfg.balance, w_importance=cfg.w_importance,
                w_load=cfg.w_load, dropout=cfg.moe_dropout, gate_init=cfg.gate_init)


def blocks_from_config(cfg: MLiTConfig) -> nn.ModuleList:
    """The encoder layers, with Eq. 2 hidden sizes and staged expert counts."""
    moe_kwargs = moe_options(cfg)
    rates = [cfg.drop_path * i / max(cfg.depth - 1, 1) for i in range(cfg.depth)]
    return nn.ModuleList(
        Block(cfg.dim, cfg.heads, cfg.groups, hidden, experts, cfg.top_k, cfg.shared, rate, cfg.attn_bias,
              **moe_kwargs)
        for hidden, experts, rate in zip(cfg.hidden_sizes(), cfg.experts_per_layer(), rates))


class Aux(NamedTuple):
    """What training needs besides the logits."""

    loss: Tensor  # () the MoE balancing loss summed over all layers (Eq. 1 per layer)
    experts: list[Tensor]  # per layer, the (B, N, K) experts each token was sent to
    routings: list[Routing]  # per layer, the gate's whole decision and its health (`gating.Routing`)


class MLiT(nn.Module):
    """mLiT classifier. With num_classes=0 it is the bare encoder that mmLiT pre-trains."""

    def __init__(self, cfg: MLiTConfig) -> None:
        super().__init__()
        self.cfg = cfg
        # [paper] linear patch projection without bias; a stride-p conv is exactly that.
        self.patch_embed = nn.Conv2d(cfg.in_chans, cfg.dim, cfg.patch_size, stride=cfg.patch_size, bias=False)
        self.pos_embed = nn.Parameter(torch.zeros(1, cfg.num_tokens, cfg.dim))  # [paper] learnable
        if cfg.pos_init == "sincos":  # [ours] MAE's table as the starting point; the dummy token starts at 0
            with torch.no_grad():
                self.pos_embed[0, :-1] = sincos_positions(cfg.dim, cfg.grid)
        else:
            nn.init.trunc_normal_(self.pos_embed, std=0.02)  # [ours] as timm
        self.blocks = blocks_from_config(cfg)
        self.norm = nn.LayerNorm(cfg.dim)
        self.head_drop = nn.Dropout(cfg.head_dropout)
        self.head = nn.Linear(cfg.dim, cfg.num_classes) if cfg.num_classes else nn.Identity()

    def embed(self, imgs: Tensor) -> Tensor:
        """imgs (B, C, S, S) -> tokens (B, N, D) with positions; the dummy patch is token N-1."""
        x = self.patch_embed(imgs).flatten(2).transpose(1, 2)  # (B, N-1, D)
        # [paper] the all-zero dummy patch: a bias-free projection maps it to the zero vector,
        # so appending zeros is the same as projecting it.
        x = F.pad(x, (0, 0, 0, 1))  # (B, N, D)
        return x + self.pos_embed

    def forward_features(self, imgs: Tensor, sparse: bool = False) -> tuple[Tensor, Aux]:
        """imgs (B, C, S, S) -> normalised tokens (B, N, D) and the routing auxiliaries."""
        x = self.embed(imgs)
        routings = []
        for blk in self.blocks:
            x, routing = blk(x, sparse=sparse)
            routings.append(routing)
        B, N, _ = x.shape
        loss = torch.stack([r.loss for r in routings]).sum()
        return self.norm(x), Aux(loss, [r.top_i.view(B, N, -1) for r in routings], routings)

    def forward_head(self, x: Tensor) -> Tensor:
        """Tokens (B, N, D) -> logits (B, classes), read from the dummy token."""
        return self.head(self.head_drop(x[:, -1]))

    def forward(self, imgs: Tensor, return_aux: bool = False, sparse: bool = False):
        """Logits (B, classes); with `return_aux`, (logits, Aux). `sparse` uses the reference MoE."""
        x, aux = self.forward_features(imgs, sparse=sparse)
        logits = self.forward_head(x)
        return (logits, aux) if return_aux else logits


def new_model(name: str, **overrides) -> MLiT:
    """A new, randomly initialised mLiT of a registered size: `new_model("xxs", num_classes=10)`.
    `mlit_edge.create_model` (train.hub) adds the shipped pretrained weights."""
    return MLiT(get_config(name, **overrides))


def count_parameters(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())
