"""Per-layer size and cost of an mLiT: parameters counted on the built model, MACs analytically.

MACs are multiply-accumulates per image in eval mode, counting matmuls and the patch projection
(element-wise work, softmax and LayerNorm are left out, as is usual). "Dense" is the folded MoE
that the deploy graph runs (every expert's W, shared V and W2 once); "top-k" is a sparse dispatch
that runs K experts' three matrices per token. The deploy graph computes its last layer for the dummy
token alone (`export/last_token.py`): keys and values of every token, the rest for one query; "macs"
counts that graph and "macs_all_tokens" the same graph with every token in the last layer.
"""
from __future__ import annotations

from .config import PAPER_PARAMS, MLiTConfig, get_config
from .mlit import MLiT, count_parameters


def attention_macs(cfg: MLiTConfig, queries: int | None = None) -> int:
    """One attention layer for `queries` tokens an image (all N by default) against the keys of all N."""
    N, D, H, G, C = cfg.num_tokens, cfg.dim, cfg.heads, cfg.groups, cfg.head_dim
    Q = N if queries is None else queries
    projections = Q * D * D * 2 + N * D * G * C * 2  # q and out; k and v (every token's)
    return projections + 2 * H * Q * N * C  # scores and the weighted sum of values


def moe_macs(cfg: MLiTConfig, hidden: int, experts: int, tokens: int | None = None) -> tuple[int, int]:
    """(dense, top-k) MACs of one MoE layer, the gate included, for `tokens` an image (all N by default)."""
    N, D = cfg.num_tokens if tokens is None else tokens, cfg.dim
    per_expert = {name: experts if name not in cfg.shared else 1 for name in ("w", "v", "w2")}
    gate = N * D * experts
    dense = N * D * hidden * sum(per_expert.values())
    sparse = N * D * hidden * 3 * cfg.top_k
    return gate + dense, gate + sparse


def model_stats(cfg: MLiTConfig) -> dict:
    """Per-layer table plus totals; parameters come from an instantiated model."""
    model = MLiT(cfg)
    layers = []
    for i, (blk, hidden, experts) in enumerate(zip(model.blocks, cfg.hidden_sizes(), cfg.experts_per_layer())):
        tokens = 1 if i == cfg.depth - 1 else None  # the last layer: the dummy token alone (the head reads it)
        attn_macs = attention_macs(cfg, tokens)
        dense, sparse = moe_macs(cfg, hidden, experts, tokens)
        layers.append({
            "layer": i, "hidden": hidden, "experts": experts, "tokens": tokens or cfg.num_tokens,
            "attn_params": count_parameters(blk.attn),
            "moe_params": count_parameters(blk.moe),
            "params": count_parameters(blk),
            "macs": attn_macs + dense, "macs_topk": attn_macs + sparse,
            "macs_all_tokens": attention_macs(cfg) + moe_macs(cfg, hidden, experts)[0],
        })
    embed_macs = cfg.num_patches * cfg.patch_size**2 * cfg.in_chans * cfg.dim
    head_macs = cfg.dim * cfg.num_classes
    return {
        "config": {k: getattr(cfg, k) for k in cfg.__dataclass_fields__},
        "layers": layers,
        "embed_params": count_parameters(model.patch_embed) + model.pos_embed.numel(),
        "head_params": count_parameters(model.norm) + count_parameters(model.head),
        "params": count_parameters(model),
        "macs": embed_macs + head_macs + sum(r["macs"] for r in layers),
        "macs_topk": embed_macs + head_macs + sum(r["macs_topk"] for r in layers),
        "macs_all_tokens": embed_macs + head_macs + sum(r["macs_all_tokens"] for r in layers),
    }


def paper_comparison(size: str, cfg: MLiTConfig) -> dict | None:
    """How the reconstructed size compares with the paper's figure, counted with a 100-class head."""
    if size not in PAPER_PARAMS:
        return None
    ours = count_parameters(MLiT(cfg.replace(num_classes=100)))
    paper = PAPER_PARAMS[size]
    return {"params_100_classes": ours, "paper_params": int(paper), "delta_pct": 100.0 * (ours - paper) / paper}


def format_layers(size: str, stats: dict, paper: dict | None) -> str:
    """The per-layer table and totals as plain text."""
    cfg = stats["config"]
    head = f"{'layer':>5} {'hidden':>6} {'experts':>7} {'attn params':>11} {'MoE params':>10} {'params':>8} {'MMACs':>7}"
    lines = [
        f"mLiT-{size.upper()}: dim {cfg['dim']}, {cfg['depth']} layers, {cfg['heads']} heads / {cfg['groups']} "
        f"groups, top-{cfg['top_k']}, shared {'+'.join(cfg['shared']) or 'none'}, {cfg['num_classes']} classes",
        head, "-" * len(head),
    ]
    for r in stats["layers"]:
        lines.append(f"{r['layer']:>5} {r['hidden']:>6} {r['experts']:>7} {r['attn_params']:>11,} "
                     f"{r['moe_params']:>10,} {r['params']:>8,} {r['macs'] / 1e6:>7.2f}")
    lines += [
        "-" * len(head),
        f"patch + position embedding {stats['embed_params']:,} params; final norm + head {stats['head_params']:,} params",
        f"total: {stats['params']:,} parameters ({stats['params'] / 1e6:.3f}M)",
        f"MACs per image: {stats['macs'] / 1e6:.1f}M dense MoE (deploy form, the last layer for the dummy token "
        f"alone; {stats['macs_all_tokens'] / 1e6:.1f}M with every token there), "
        f"{stats['macs_topk'] / 1e6:.1f}M sparse top-{cfg['top_k']}",
    ]
    if paper:
        lines.append(f"vs paper: {paper['params_100_classes'] / 1e6:.3f}M with a 100-class head against "
                     f"{paper['paper_params'] / 1e6:.3f}M ({paper['delta_pct']:+.1f}%). Sizes are reconstructed "
                     f"(the paper's Table 1 is lost); see shared/paper/NOTES.md.")
    return "\n".join(lines)


def size_report(size: str, num_classes: int = 100) -> tuple[str, dict]:
    """`mlit-edge info`: the per-layer table as text, and the same as a JSON-able dict."""
    cfg = get_config(size, num_classes=num_classes)
    stats = model_stats(cfg)
    paper = paper_comparison(size, cfg)
    return format_layers(size, stats, paper), {"size": size, **stats, "paper": paper}
