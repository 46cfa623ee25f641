"""`to_deploy(model)`: an eval-mode, static-shape copy of an mLiT for export to ONNX and TensorRT.

What changes against the training model, and why it is still the same function:
- the gate is the clean `x Wg` (noise only exists in training), top-k by TopK, and the sparse gate
  matrix is rebuilt from the top-k indices with a one-hot comparison instead of a scatter;
- the MoE runs in the folded dense form: all experts' W in one matmul, the shared V and W2 once,
  exact because the gates of a token sum to 1; no token is dropped and no capacity factor exists;
- attention is plain matmul/softmax with the key/value heads repeated explicitly and the 1/sqrt(C)
  scale applied to Q;
- dropout and drop-path are gone.
Only the batch dimension may vary. Letters: B batch, N tokens, D width, E experts, K chosen,
H query heads, G key/value heads, C head size, T = B*N tokens, F hidden size.
"""
from __future__ import annotations

import copy
import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..model.attention import Attention
from ..model.mlit import MLiT
from ..model.moe import MoE, SwiGLUExperts


class StaticAttention(nn.Module):
    """Grouped-query attention as explicit matmuls, for exporters and TensorRT."""

    def __init__(self, attn: Attention) -> None:
        super().__init__()
        self.heads, self.groups, self.head_dim = attn.heads, attn.groups, attn.head_dim
        self.q, self.k, self.v, self.proj = attn.q, attn.k, attn.v, attn.proj

    def forward(self, x: Tensor) -> Tensor:
        B, N, D = x.shape
        H, G, C = self.heads, self.groups, self.head_dim
        q = (self.q(x) * (1.0 / math.sqrt(C))).view(B, N, H, C).transpose(1, 2)  # (B, H, N, C)
        k = self.k(x).view(B, N, G, 1, C).expand(B, N, G, H // G, C).reshape(B, N, H, C).transpose(1, 2)
        v = self.v(x).view(B, N, G, 1, C).expand(B, N, G, H // G, C).reshape(B, N, H, C).transpose(1, 2)
        attn = (q @ k.transpose(-1, -2)).softmax(dim=-1)  # (B, H, N, N)
        return self.proj((attn @ v).transpose(1, 2).reshape(B, N, D))  # (B, N, D)


class StaticMoE(nn.Module):
    """Clean top-k routing plus the folded dense experts; returns the output and the (T, K) choices."""

    def __init__(self, moe: MoE) -> None:
        super().__init__()
        self.w_gate = moe.gate.w_gate
        self.k = moe.gate.k
        self.n_experts = moe.gate.experts
        self.experts: SwiGLUExperts = moe.experts

    def forward(self, x: Tensor) -> tuple[Tensor, Tensor]:
        B, N, D = x.shape
        flat = x.reshape(-1, D)  # (T, D)
        logits = self.w_gate(flat)  # (T, E)
        top_v, top_i = logits.topk(self.k, dim=-1)  # (T, K)
        one_hot = (top_i.unsqueeze(-1) == torch.arange(self.n_experts, device=x.device)).to(top_v.dtype)  # (T, K, E)
        gates = (top_v.softmax(dim=-1).unsqueeze(1) @ one_hot).squeeze(1)  # (T, E), k non-zeros
        return self.experts(flat, gates).view(B, N, D), top_i


class StaticBlock(nn.Module):
    def __init__(self, blk) -> None:
        super().__init__()
        self.norm1, self.norm2 = blk.norm1, blk.norm2
        self.attn = StaticAttention(blk.attn)
        self.moe = StaticMoE(blk.moe)

    def forward(self, x: Tensor) -> tuple[Tensor, Tensor]:
        x = x + self.attn(self.norm1(x))
        y, top_i = self.moe(self.norm2(x))
        return x + y, top_i


class DeployMLiT(nn.Module):
    """The exported classifier: images (B, 3, 36, 36) -> logits, plus per-layer expert choices when
    `probe` is set (each (B, N, K) int64), so a runtime's routing can be compared with PyTorch's."""

    def __init__(self, model: MLiT, probe: bool = False) -> None:
        super().__init__()
        self.cfg, self.probe = model.cfg, probe
        self.patch_embed, self.pos_embed = model.patch_embed, model.pos_embed
        self.blocks = nn.ModuleList(StaticBlock(b) for b in model.blocks)
        self.norm, self.head = model.norm, model.head

    def forward(self, imgs: Tensor):
        x = self.patch_embed(imgs).flatten(2).transpose(1, 2)  # (B, N-1, D)
        x = F.pad(x, (0, 0, 0, 1)) + self.pos_embed  # (B, N, D): the zero dummy patch, then positions
        routes = []
        for blk in self.blocks:
            x, top_i = blk(x)
            routes.append(top_i.view(x.shape[0], x.shape[1], -1))  # (B, N, K)
        logits = self.head(self.norm(x)[:, -1])
        return (logits, *routes) if self.probe else logits


def to_deploy(model: MLiT, probe: bool = False) -> DeployMLiT:
    """A new eval-mode static-shape module computing `model`'s eval function; `model` is untouched."""
    if not isinstance(model, MLiT) or not model.cfg.num_classes:
        raise TypeError("to_deploy takes an mLiT classifier (an mmLiT must be fine-tuned into one first)")
    deployed = DeployMLiT(copy.deepcopy(model), probe=probe).eval()
    for p in deployed.parameters():
        p.requires_grad_(False)
    return deployed
