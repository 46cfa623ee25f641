"""`to_deploy(model)`: an eval-mode, static-shape copy of an mLiT for export to ONNX and TensorRT.

The same function as the training model in eval mode (parity <= 1e-5, the same expert choices),
in the fewest graph nodes we found, since on a Jetson every unfused layer is a kernel launch:
- the token stream is one (T, D) matrix, T = B*N; every reshape names its sizes with -1 for the
  batch, so the graph holds no shape arithmetic, dynamic batch or not;
- attention: one QKV matmul whose columns are ordered by group ([q heads, k, v] of each group) with
  1/sqrt(C) folded into the query columns; one transpose puts each group's query heads against
  its single key/value head in one broadcast matmul, so repeated K/V heads are never materialised;
  the output projection adds the residual in the same Gemm;
- the gate is the clean `x Wg` (noise only exists in training), top-k by TopK, and the dense gate
  row is the softmax of the top-k values times a one-hot of their indices (ONNX OneHot, no scatter);
- the MoE is folded: all experts' W and the shared V in one Gemm, the gate-weighted sum of the
  experts' activations before the shared V and W2, exact because a token's gates sum to 1; no
  token is dropped and no capacity factor exists; other sharing arrangements get the general form;
- dropout and drop-path are gone.
`to_deploy(model, attention=FORM)` writes each layer's attention core as one ONNX Runtime kernel
instead (`fused_attention`, the ONNX Runtime flavour); everything else is the same graph. Both flavours
compute the last layer for the dummy token alone, the one token the head reads (`last_token`).
Letters: B batch, N tokens, D width, E experts, K chosen, H query heads, G key/value heads,
R = H/G query heads per group, C head size, T = B*N tokens, F hidden size.
"""
from __future__ import annotations

import copy
import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..model.attention import Attention
from ..model.mlit import MLiT
from ..model.moe import MoE, mix_experts
from . import ATTENTION_FORMS, GROUPED
from .fused_attention import FusedAttention, frozen as _frozen, pad_heads as _pad, translations
from .last_token import LastTokenAttention, dummy_rows


@torch.library.custom_op("mlit_edge::one_hot", mutates_args=())
def one_hot(indices: Tensor, depth: int) -> Tensor:
    """float32 one-hot of int64 indices: (..., K) -> (..., K, depth). Exported as one ONNX OneHot."""
    return F.one_hot(indices, depth).to(torch.float32)


@one_hot.register_fake
def _(indices: Tensor, depth: int) -> Tensor:
    return indices.new_empty((*indices.shape, depth), dtype=torch.float32)


def onnx_translations(attention: str = GROUPED) -> dict:
    """How the exporter writes this module's own ops in ONNX, with the attention in form `attention`."""
    from onnxscript import opset18 as op

    def one_hot_onnx(indices, depth: int):
        return op.OneHot(indices, op.Constant(value_int=depth), op.Constant(value_floats=[0.0, 1.0]), axis=-1)

    fused = {} if attention == GROUPED else translations(attention)
    return {torch.ops.mlit_edge.one_hot.default: one_hot_onnx, **fused}


class StaticAttention(nn.Module):
    """Grouped-query attention in five matmul-class nodes; returns x + attention(LN(x))."""

    def __init__(self, attn: Attention, tokens: int, pad_to: int | None = None) -> None:
        super().__init__()
        H, G, C = attn.heads, attn.groups, attn.head_dim
        R, P = H // G, pad_to or C  # P: each head's Q, K and V zero-padded to P columns (--pad-heads)
        self.N, self.G, self.R, self.C = tokens, G, R, P
        wq, wk, wv = attn.split_weights()  # (H*C, D), (G*C, D), (G*C, D)
        bq, bk, bv = attn.split_biases()  # (H*C,), (G*C,), (G*C,)

        def per_group(q: Tensor, k: Tensor, v: Tensor) -> Tensor:  # each head padded first: (H*P,), (G*P,) x2
            q, k, v = _pad(q, H, C, P), _pad(k, G, C, P), _pad(v, G, C, P)
            return torch.cat([t for g in range(G) for t in (q[g * R * P:(g + 1) * R * P], k[g * P:(g + 1) * P],
                                                           v[g * P:(g + 1) * P])])

        root = math.sqrt(C)  # the softmax scale of the model's own head size, folded into the query columns
        # (divided, as ever: the same bits as the graphs of earlier releases, whose routing ties the tests pin)
        self.w_qkv = _frozen(per_group(wq / root, wk, wv).t())  # (D, G*(R+2)*P)
        self.w_proj = _frozen(_pad(attn.proj.weight.t(), H, C, P))  # (H*P, D): the padded columns meet zero rows
        # [reading] attn_bias: the biases ride in the same Gemms; none at all in the bias-free default graph
        self.b_qkv = _frozen(per_group(bq / root, bk, bv)) if attn.qkv.bias is not None else None
        self.b_proj = _frozen(attn.proj.bias) if attn.proj.bias is not None else None

    def forward(self, h: Tensor, residual: Tensor) -> Tensor:
        N, G, R, C = self.N, self.G, self.R, self.C
        qkv = h @ self.w_qkv if self.b_qkv is None else torch.addmm(self.b_qkv, h, self.w_qkv)
        qkv = qkv.view(-1, N, G, R + 2, C).permute(0, 2, 3, 1, 4)  # (B, G, R+2, N, C)
        q, k, v = qkv.split([R, 1, 1], dim=2)  # (B, G, R, N, C), (B, G, 1, N, C) x2
        attn = (q @ k.transpose(-1, -2)).softmax(dim=-1)  # (B, G, R, N, N): R heads against one K
        out = (attn @ v).permute(0, 3, 1, 2, 4).reshape(-1, G * R * C)  # (T, H*C), heads in order g*R + r
        if self.b_proj is not None:
            residual = residual + self.b_proj
        return torch.addmm(residual, out, self.w_proj)  # (T, D)


class StaticMoE(nn.Module):
    """Clean top-k routing and the folded experts; returns x + MoE(LN(x)) and the (T, K) choices."""

    def __init__(self, moe: MoE) -> None:
        super().__init__()
        ex = moe.experts
        D, self.F, self.E, self.k = ex.dim, ex.hidden, ex.experts, moe.gate.k
        self.n_w, self.n_v, self.n_w2 = ex.w.shape[1], ex.v.shape[1], ex.w2.shape[0]
        self.w_gate = _frozen(moe.gate.w_gate.weight.t())  # (D, E)
        w_in, b_in = ex.in_proj()
        self.w_in, self.b_in = _frozen(w_in), _frozen(b_in)  # (D, (n_w+n_v)*F), one Gemm
        self.w2 = _frozen(ex.w2.reshape(-1, D))  # (n_w2*F, D)
        self.d = _frozen(ex.d if self.n_w2 > 1 else ex.d[0])  # (E, D) or (D,)

    def forward(self, h: Tensor, residual: Tensor) -> tuple[Tensor, Tensor]:
        E, Fh = self.E, self.F
        top_v, top_i = (h @ self.w_gate).topk(self.k, dim=-1)  # (T, K)
        gates = top_v.softmax(dim=-1).unsqueeze(1) @ one_hot(top_i, E)  # (T, 1, E), k non-zeros
        a, u = torch.addmm(self.b_in, h, self.w_in).view(-1, self.n_w + self.n_v, Fh).split(
            [self.n_w, self.n_v], dim=1)  # (T, n_w, F), (T, n_v, F)
        if self.n_w2 == 1:  # the paper's sharing mixes the W branch, then multiplies the shared V once
            z = mix_experts(a, u, gates)  # (T, 1, F)
            return torch.addmm(self.d, z.view(-1, Fh), self.w2) + residual, top_i  # (T, D)
        z = gates.transpose(1, 2) * (F.silu(a) * u)  # (T, E, F): each expert's term, weighted
        return torch.addmm(gates.view(-1, E) @ self.d, z.view(-1, E * Fh), self.w2) + residual, top_i


class StaticBlock(nn.Module):
    """One encoder layer; with `last_only` (the last layer) for the dummy token alone (`export/last_token.py`):
    (T, D) in, (B, D) and its (B, K) choices out."""

    def __init__(self, blk, tokens: int, attention: str = GROUPED, last_only: bool = False,
                 pad_to: int | None = None) -> None:
        super().__init__()
        self.norm1, self.norm2, self.tokens, self.last_only = blk.norm1, blk.norm2, tokens, last_only
        if attention != GROUPED:
            self.attn = FusedAttention(blk.attn, tokens, attention, pad_to)
        else:
            self.attn = LastTokenAttention(blk.attn, tokens, pad_to) if last_only else \
                StaticAttention(blk.attn, tokens, pad_to)
        self.moe = StaticMoE(blk.moe)

    def forward(self, x: Tensor) -> tuple[Tensor, Tensor]:
        h = self.norm1(x)  # every token's: all of them are keys and values
        if self.last_only:  # the residual, the norms and the MoE of the dummy token alone
            x = self.attn(h, dummy_rows(x, self.tokens), last_only=True)  # (B, D)
        else:
            x = self.attn(h, x)  # (T, D)
        return self.moe(self.norm2(x), x)


class DeployMLiT(nn.Module):
    """The exported classifier: images (B, 3, S, S) -> logits, plus per-layer expert choices when
    `probe` is set (each (B, N, K) int64; the last layer's (B, 1, K), the dummy token's), so a runtime's
    routing can be compared with PyTorch's. `prune_last=False` keeps every token in the last layer (the
    graph of earlier releases, kept for before/after measurements)."""

    def __init__(self, model: MLiT, probe: bool = False, attention: str = GROUPED, pad_to: int | None = None,
                 prune_last: bool = True) -> None:
        super().__init__()
        self.cfg, self.probe, self.attention, self.prune_last = model.cfg, probe, attention, prune_last
        self.patch_embed, self.pos_embed = model.patch_embed, model.pos_embed
        last = len(model.blocks) - 1
        self.blocks = nn.ModuleList(StaticBlock(b, model.cfg.num_tokens, attention, prune_last and i == last,
                                                pad_to)
                                    for i, b in enumerate(model.blocks))
        self.norm, self.head = model.norm, model.head

    def forward(self, imgs: Tensor):
        N, D = self.cfg.num_tokens, self.cfg.dim
        x = self.patch_embed(imgs).flatten(2).transpose(1, 2)  # (B, N-1, D)
        x = (F.pad(x, (0, 0, 0, 1)) + self.pos_embed).reshape(-1, D)  # (T, D): the zero dummy patch, positions
        routes = []
        for blk in self.blocks:
            x, top_i = blk(x)
            if self.probe:
                routes.append(top_i.view(-1, 1 if blk.last_only else N, top_i.shape[-1]))  # (B, N or 1, K)
        # the last layer computed the dummy token alone, or LN is per token and only the dummy's is read
        tail = x if self.prune_last else dummy_rows(x, N)  # (B, D)
        logits = self.head(self.norm(tail))
        return (logits, *routes) if self.probe else logits


def to_deploy(model: MLiT, probe: bool = False, attention: str = GROUPED, pad_to: int | None = None,
              prune_last: bool = True) -> DeployMLiT:
    """A new eval-mode static-shape module computing `model`'s eval function; `model` is untouched.
    `attention`: "grouped" (portable, TensorRT) or a fused form of `ATTENTION_FORMS` (ONNX Runtime).
    `pad_to`: each head's Q, K and V zero-padded to this head size (devices.mha_rules.pad_choice); None: none.
    `prune_last`: the last layer for the dummy token alone (exact; `export/last_token.py`)."""
    if not isinstance(model, MLiT) or not model.cfg.num_classes:
        raise TypeError("to_deploy takes an mLiT classifier (an mmLiT must be fine-tuned into one first)")
    if attention != GROUPED and attention not in ATTENTION_FORMS:
        raise ValueError(f"attention form {attention!r}: choose from {GROUPED}, {', '.join(ATTENTION_FORMS)}")
    head = model.cfg.dim // model.cfg.heads
    if pad_to is not None and pad_to < head:
        raise ValueError(f"pad_to {pad_to}: below the model's head size {head}")
    deployed = DeployMLiT(copy.deepcopy(model), probe=probe, attention=attention, pad_to=pad_to,
                          prune_last=prune_last).eval()
    for p in deployed.parameters():
        p.requires_grad_(False)
    return deployed
