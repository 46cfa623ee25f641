"""The attention of the ONNX Runtime flavour: each layer's attention core as one fused kernel.

The portable deploy graph (`static.StaticAttention`, the TensorRT flavour) writes attention as explicit
matmuls, a softmax, transposes and splits; on ONNX Runtime's CPU kernels those cost a third of the time
and more. Here the core (softmax(q k^T) v, all heads) is one torch custom op, `mlit_edge::attention`,
which the exporter writes as one ONNX Runtime attention node in the form asked for (`ATTENTION_FORMS`
in `export/__init__.py`, by name):

- "onnx": the standard `Attention` op (ONNX opset 23). ONNX Runtime's CPU kernel (1.23 and later)
  takes the GQA's key/value heads as they are (`kv_num_heads`): Q, K and V come from three MatMuls.
  The fastest form measured (`benchmarks/deploy_latency.py`), so the one `--target onnxruntime` builds.
- "ms-mha": `com.microsoft.MultiHeadAttention` on Q, K, V from one MatMul and a Split.
- "ms-attention": `com.microsoft.Attention`, which also takes the QKV projection in.
  Both contrib ops are multi-head only: each key/value head's weights are repeated for the H/G query
  heads of its group (head h reads key/value head h // (H/G), as in the training model), so their K/V
  projections grow by H/G.

Every form is the same function as the training model in eval mode (1/sqrt(C) folded into the query
weights, as in the portable graph, so the kernels run with scale 1). No form is TensorRT-buildable.
With `--pad-heads` each head's Q, K and V are zero-padded (`pad_heads`), as in the portable graph; ONNX Runtime
measured no faster for it (benchmarks/pad_heads.py), so `auto` leaves this flavour unpadded.
In the last layer only the dummy token's query is needed (`last_only`: the head reads no other token),
the rewrite both flavours share (`export/last_token.py`).
Letters: B batch, N tokens, D width, H query heads, G key/value heads, R = H/G, C head size, T = B*N.
"""
from __future__ import annotations

import math
import torch
from torch import Tensor, nn

from ..model.attention import Attention
from . import ATTENTION_FORMS as FORMS


def _grouped_attention(q: Tensor, k: Tensor, v: Tensor, heads: int, groups: int) -> Tensor:
    """softmax(q k^T) v for q (B, Q, H*C) and k, v (B, N, G*C), Q = N or fewer queries; returns (B, Q, H*C)."""
    B, Q, _ = q.shape
    N, G, R = k.shape[1], groups, heads // groups
    C = q.shape[-1] // heads
    q = q.reshape(B, Q, G, R, C).permute(0, 2, 3, 1, 4)  # (B, G, R, Q, C)
    k = k.reshape(B, N, G, 1, C).permute(0, 2, 3, 4, 1)  # (B, G, 1, C, N)
    v = v.reshape(B, N, G, 1, C).permute(0, 2, 3, 1, 4)  # (B, G, 1, N, C)
    out = (q @ k).softmax(dim=-1) @ v  # (B, G, R, Q, C)
    return out.permute(0, 3, 1, 2, 4).reshape(B, Q, heads * C)


@torch.library.custom_op("mlit_edge::attention", mutates_args=())
def attention(q: Tensor, k: Tensor, v: Tensor, heads: int, groups: int) -> Tensor:
    """The attention core as one op (scale already in q): exported as one fused ONNX node."""
    return _grouped_attention(q, k, v, heads, groups)


@attention.register_fake
def _(q: Tensor, k: Tensor, v: Tensor, heads: int, groups: int) -> Tensor:
    return q.new_empty(q.shape)


@torch.library.custom_op("mlit_edge::projected_attention", mutates_args=())
def projected_attention(x: Tensor, w: Tensor, b: Tensor, heads: int) -> Tensor:
    """Multi-head attention of x (B, N, D) with its QKV projection w (D, 3*H*C), b (3*H*C): one op."""
    q, k, v = (x @ w + b).chunk(3, dim=-1)  # (B, N, H*C) x3
    return _grouped_attention(q, k, v, heads, heads)


@projected_attention.register_fake
def _(x: Tensor, w: Tensor, b: Tensor, heads: int) -> Tensor:
    return x.new_empty((*x.shape[:2], w.shape[1] // 3))


def _schema(name: str, domain: str, version: int, inputs: list[str], attributes: dict):
    """An ONNX schema for the one output the graph uses (the exporter needs one to emit a node; the
    contrib ops have none in the onnx package, and opset 23's Attention declares four outputs)."""
    from onnx.defs import OpSchema

    param = OpSchema.FormalParameter
    return OpSchema(name, domain, version, inputs=[param(i, "T") for i in inputs], outputs=[param("Y", "T")],
                    type_constraints=[("T", ["tensor(float)", "tensor(float16)"], "")],
                    attributes=[OpSchema.Attribute(a, kind, "", required=False) for a, kind in attributes.items()])


def translations(form: str) -> dict:
    """How the exporter writes `mlit_edge::attention` (and its projected variant) in `form`."""
    from onnx.defs import OpSchema
    from onnxscript import values

    INT, FLOAT = OpSchema.AttrType.INT, OpSchema.AttrType.FLOAT
    ms = values.Opset("com.microsoft", 1)
    if form == "onnx":
        op = values.Op(values.Opset("", 23), "Attention", _schema("Attention", "", 23, ["Q", "K", "V"],
                                                                   {"q_num_heads": INT, "kv_num_heads": INT,
                                                                    "scale": FLOAT}))
        return {torch.ops.mlit_edge.attention.default:
                lambda q, k, v, heads, groups: op(q, k, v, q_num_heads=heads, kv_num_heads=groups, scale=1.0)}
    if form == "ms-mha":
        op = values.Op(ms, "MultiHeadAttention", _schema("MultiHeadAttention", "com.microsoft", 1,
                                                         ["query", "key", "value"], {"num_heads": INT, "scale": FLOAT}))
        return {torch.ops.mlit_edge.attention.default:
                lambda q, k, v, heads, groups: op(q, k, v, num_heads=heads, scale=1.0)}
    if form == "ms-attention":
        op = values.Op(ms, "Attention", _schema("Attention", "com.microsoft", 1, ["input", "weights", "bias"],
                                                {"num_heads": INT, "scale": FLOAT}))
        return {torch.ops.mlit_edge.projected_attention.default:
                lambda x, w, b, heads: op(x, w, b, num_heads=heads, scale=1.0)}
    raise ValueError(f"attention form {form!r}: choose from {', '.join(FORMS)}")


def pad_heads(t: Tensor, heads: int, size: int, to: int) -> Tensor:
    """Each head's rows of `t` (heads*size, ...) followed by zero rows up to `to`: (heads*to, ...). A head's
    padded query and key columns add 0 to q k^T, its padded value columns meet the output projection's padded
    (zero) rows: the same function, with a head size TensorRT's fused attention takes (devices.mha_rules)."""
    if to == size:
        return t
    t = t.reshape(heads, size, *t.shape[1:])  # (heads, size, ...)
    zeros = t.new_zeros((heads, to - size, *t.shape[2:]))
    return torch.cat([t, zeros], dim=1).reshape(heads * to, *t.shape[2:])


def frozen(t: Tensor) -> nn.Parameter:
    """A deploy-graph weight: a contiguous copy that no optimiser or export trace treats as trainable."""
    return nn.Parameter(t.detach().clone().contiguous(), requires_grad=False)


class FusedAttention(nn.Module):
    """Grouped-query attention with its core in one ONNX Runtime kernel; returns x + attention(LN(x))."""

    def __init__(self, attn: Attention, tokens: int, form: str, pad_to: int | None = None) -> None:
        super().__init__()
        if form not in FORMS:
            raise ValueError(f"attention form {form!r}: choose from {', '.join(FORMS)}")
        H, G, C = attn.heads, attn.groups, attn.head_dim
        P = pad_to or C  # each head zero-padded to P (`pad_heads`); the scale stays 1/sqrt(C)
        self.N, self.H, self.G, self.C, self.form = tokens, H, G, P, form
        (wq, wk, wv), (bq, bk, bv) = attn.split_weights(), attn.split_biases()
        root = math.sqrt(C)  # divided, as in the portable graph: the same query weights to the bit
        wq, bq = pad_heads(wq / root, H, C, P), pad_heads(bq / root, H, C, P)
        wk, wv, bk, bv = (pad_heads(t, G, C, P) for t in (wk, wv, bk, bv))
        C = P
        if FORMS[form].repeat_kv:  # (G*C, ...) -> (H*C, ...): key/value head g once per query head of group g
            wk, wv, bk, bv = (t.reshape(G, C, -1).repeat_interleave(H // G, dim=0).reshape(H * C, -1).squeeze(-1)
                              for t in (wk, wv, bk, bv))
        weights, biases = (wq, wk, wv), (bq, bk, bv)
        has_bias = attn.qkv.bias is not None
        if form == "onnx":  # three projections: Q (D, H*C), K and V (D, G*C)
            self.w_q, self.w_k, self.w_v = (frozen(w.t()) for w in weights)
            self.b_q, self.b_k, self.b_v = (frozen(b) for b in biases) if has_bias else (None, None, None)
        else:  # one projection for the contrib ops: [q | k | v] columns, (D, 3*H*C)
            self.w_qkv = frozen(torch.cat(weights).t())
            self.b_qkv = frozen(torch.cat(biases)) if has_bias else None
        self.w_proj = frozen(pad_heads(attn.proj.weight.t(), H, attn.head_dim, P))  # (H*P, D): zero padded rows
        self.b_proj = frozen(attn.proj.bias) if attn.proj.bias is not None else None

    @staticmethod
    def _linear(x: Tensor, w: Tensor, b: Tensor | None) -> Tensor:
        return x @ w if b is None else x @ w + b

    def forward(self, h: Tensor, residual: Tensor, last_only: bool = False) -> Tensor:
        """(T, D) -> (T, D); with `last_only` (`last_token`: the block hands the dummy token's residual, (B, D)),
        (B, D): the last token of each image alone attends (the only one the head reads after the last layer)."""
        N, H, G, C = self.N, self.H, self.G, self.C
        x = h.view(-1, N, h.shape[-1])  # (B, N, D)
        if self.form == "onnx":
            queries = x[:, -1:] if last_only else x  # (B, 1 or N, D)
            out = attention(self._linear(queries, self.w_q, self.b_q), self._linear(x, self.w_k, self.b_k),
                            self._linear(x, self.w_v, self.b_v), H, G)  # (B, 1 or N, H*C)
        elif self.form == "ms-mha":
            q, k, v = self._linear(x, self.w_qkv, self.b_qkv).split(H * C, dim=-1)  # (B, N, H*C) x3
            out = attention(q[:, -1:] if last_only else q, k, v, H, H)
        else:  # its bias input is given even when zero: without one ONNX Runtime 1.20 and 1.23 crash (1.32 not)
            bias = self.b_qkv if self.b_qkv is not None else self.w_qkv.new_zeros(self.w_qkv.shape[1])
            out = projected_attention(x, self.w_qkv, bias, H)  # self-attention only: every query
            out = out[:, -1:] if last_only else out
        if self.b_proj is not None:
            residual = residual + self.b_proj
        return torch.addmm(residual, out.reshape(-1, H * C), self.w_proj)  # (T or B, D)
