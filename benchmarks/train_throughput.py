"""Training-step throughput of mLiT, side by side in one run: the previous release against today's.

Every variant is the same model with the same weights and the same batch:
- "before": the previous release's step: three attention projections, K/V heads repeated with
  repeat_interleave, then PyTorch's attention kernel; the dense MoE with W and V as two matmuls
  and the gates applied after the shared V; fp32; AdamW's per-tensor loop;
- "after": today's model (one fused QKV projection, `enable_gqa`, no repeated heads, fused W|V)
  and today's optimizer (`train.loop.make_optimizer`: fused AdamW), fp32;
- "after, bf16 autocast": the same under the autocast that `mlit-edge train --amp auto` picks on
  this machine (bf16 on a CPU with AMX; fp16 on CUDA; the row is absent where auto means fp32);
- "after, torch.compile" and "after, bf16 + compile" (with --compile): the two through torch.compile,
  the latter being what `mlit-edge train --compile` runs on an AMX CPU;
- "per-expert dispatch": today's model with the reference MoE that gathers each expert's tokens.
Rounds alternate between the variants so that machine noise hits them alike; the report is images
per second and the ratio to "before". The MoE layer alone is timed the same way (dense vs dispatch);
on a CPU, so are the attention core alone (PyTorch's kernel in fp32 and bf16, the two-matmul form)
and an fp32 against a bf16 matmul.

    python benchmarks/train_throughput.py --size xxs --batch 32 [--compile] [--amp auto|bf16|off]
"""
from __future__ import annotations

import argparse
import copy
import json
import platform
import statistics
import time
import types

import torch
import torch.nn.functional as F
from torch import nn

from mlit_edge.model.mlit import new_model as create_model
from mlit_edge.model.moe import MoE
from mlit_edge.train.device import amp_dtype
from mlit_edge.train.loop import autocast, make_optimizer

DTYPE_NAMES = {torch.bfloat16: "bf16", torch.float16: "fp16"}


class RepeatedKVAttention(nn.Module):
    """The previous release's attention: separate q, k, v projections and K/V heads repeated."""

    def __init__(self, attn) -> None:
        super().__init__()
        self.heads, self.groups, self.head_dim = attn.heads, attn.groups, attn.head_dim
        wq, wk, wv = (w.detach().clone() for w in attn.split_weights())
        self.q, self.k, self.v = (nn.Linear(w.shape[1], w.shape[0], bias=False) for w in (wq, wk, wv))
        with torch.no_grad():
            for lin, w in zip((self.q, self.k, self.v), (wq, wk, wv)):
                lin.weight.copy_(w)
        self.proj = copy.deepcopy(attn.proj)

    def forward(self, x):
        B, N, D = x.shape
        H, G, C = self.heads, self.groups, self.head_dim
        q = self.q(x).view(B, N, H, C).transpose(1, 2)
        k = self.k(x).view(B, N, G, C).transpose(1, 2).repeat_interleave(H // G, dim=1)
        v = self.v(x).view(B, N, G, C).transpose(1, 2).repeat_interleave(H // G, dim=1)
        return self.proj(F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(B, N, D))


def previous_experts_forward(self, x, gates):
    """The previous release's SwiGLUExperts.forward (for the paper's sharing: V and W2 shared)."""
    def in_proj(weight, bias):
        n = weight.shape[1]
        return (x @ weight.reshape(self.dim, n * self.hidden) + bias.reshape(-1)).view(-1, n, self.hidden)

    z = F.silu(in_proj(self.w, self.b)) * in_proj(self.v, self.c)  # (T, E, H)
    return (gates.unsqueeze(1) @ z).squeeze(1) @ self.w2[0] + self.d[0]


def before(model: nn.Module) -> nn.Module:
    old = copy.deepcopy(model)
    for blk in old.blocks:
        blk.attn = RepeatedKVAttention(blk.attn)
        blk.moe.experts.forward = types.MethodType(previous_experts_forward, blk.moe.experts)
    return old


def step_time(model, opt, dtype, sparse: bool, x, y) -> float:
    """One training step as `train.loop` makes it: forward under autocast, fp32 loss, backward, AdamW."""
    start = time.perf_counter()
    with autocast(x.device, dtype):
        logits, aux = model(x, return_aux=True, sparse=sparse)
    loss = F.cross_entropy(logits.float(), y) + aux.loss
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    return time.perf_counter() - start


def layer_step_time(moe: MoE, x: torch.Tensor, sparse: bool) -> float:
    """Forward and backward of one MoE layer alone (training mode, noisy gate)."""
    start = time.perf_counter()
    y, routing = moe(x, sparse=sparse)
    (y.square().mean() + routing.loss).backward()
    return time.perf_counter() - start


def matmul_rates(n: int = 1024, reps: int = 10) -> dict[str, float]:
    """GFLOP/s of an n x n matmul in fp32 and in bf16 on this machine (AMX shows in the ratio)."""
    rates = {}
    for name, dtype in (("fp32", torch.float32), ("bf16", torch.bfloat16)):
        a, b = torch.randn(n, n, dtype=dtype), torch.randn(n, n, dtype=dtype)
        a @ b
        start = time.perf_counter()
        for _ in range(reps):
            a @ b
        rates[name] = 2 * n**3 * reps / (time.perf_counter() - start) / 1e9
    return rates


def bench_attention(cfg, batch: int, rounds: int, steps: int) -> dict[str, float]:
    """Forward + backward of one layer's attention core on the CPU, median ms: PyTorch's kernel in fp32 and
    in bf16, and the two-matmul form in bf16 (what compiled bf16 training traces)."""
    from mlit_edge.model.attention import _grouped_matmul_attention

    N, C = cfg.num_tokens, cfg.head_dim
    base = [torch.randn(batch, h, N, C) for h in (cfg.heads, cfg.groups, cfg.groups)]
    kernel = lambda q, k, v: F.scaled_dot_product_attention(q, k, v, enable_gqa=True)  # noqa: E731
    variants = {"kernel fp32": (kernel, torch.float32), "kernel bf16": (kernel, torch.bfloat16),
                "two matmuls bf16": (lambda q, k, v: _grouped_matmul_attention(q, k, v, 0.0, False), torch.bfloat16)}

    def once(fn, dtype) -> float:
        q, k, v = (t.to(dtype).requires_grad_() for t in base)
        start = time.perf_counter()
        fn(q, k, v).float().square().sum().backward()
        return time.perf_counter() - start

    times = {name: [] for name in variants}
    for name, v in variants.items():
        once(*v)
    for _ in range(rounds):
        for name, v in variants.items():
            times[name] += [once(*v) for _ in range(steps)]
    return {name: statistics.median(t) * 1e3 for name, t in times.items()}


def bench_layers(cfg, batch: int, rounds: int, steps: int, device) -> list[dict]:
    """The MoE layers of the model alone, one per expert count (3, 4, 5), side by side."""
    rows, seen = [], set()
    for hidden, experts in zip(cfg.hidden_sizes(), cfg.experts_per_layer()):
        if experts in seen:
            continue
        seen.add(experts)
        moe = MoE(cfg.dim, hidden, experts, cfg.top_k, cfg.shared).to(device).train()
        x = torch.randn(batch, cfg.num_tokens, cfg.dim, device=device)
        times = {False: [], True: []}
        for sparse in (False, True):
            layer_step_time(moe, x, sparse)
        for _ in range(rounds):
            for sparse in (False, True):
                times[sparse] += [layer_step_time(moe, x, sparse) for _ in range(steps)]
        dense_t, sparse_t = statistics.median(times[False]), statistics.median(times[True])
        rows.append({"hidden": hidden, "experts": experts, "dense_ms": dense_t * 1e3, "dispatch_ms": sparse_t * 1e3,
                     "speedup": sparse_t / dense_t})
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", default="xxs")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--rounds", type=int, default=5, help="alternating rounds per variant")
    ap.add_argument("--steps", type=int, default=3, help="timed steps per round")
    ap.add_argument("--compile", action="store_true", help="also time today's model through torch.compile")
    ap.add_argument("--amp", default="auto", choices=["auto", "bf16", "fp16", "off"],
                    help="the low-precision variants: what `mlit-edge train --amp` would use (auto: bf16 on a CPU "
                         "with AMX, fp16 on CUDA, none elsewhere)")
    ap.add_argument("--no-layers", action="store_true",
                    help="skip the sections that time one part alone (MoE layer, attention core, matmul)")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--json", default=None, help="also write the results here")
    args = ap.parse_args()

    torch.manual_seed(0)
    device = torch.device(args.device)
    base = create_model(args.size, num_classes=10).to(device).train()
    if base.cfg.shared != ("v", "w2"):
        raise SystemExit("the previous release's MoE is reproduced for the paper's sharing (V and W2) only")
    try:
        low = amp_dtype(args.amp, device)
    except ValueError as e:  # e.g. --amp fp16 on a CPU
        raise SystemExit(str(e)) from None
    # name -> (model, dtype, compiled, per-expert dispatch); "before" also keeps the previous optimizer loop
    plan = {"before": (before(base), None, False, False), "after": (copy.deepcopy(base), None, False, False),
            "per-expert dispatch": (copy.deepcopy(base), None, False, True)}
    if low is not None:
        plan[f"after, {DTYPE_NAMES[low]} autocast"] = (copy.deepcopy(base), low, False, False)
    if args.compile:
        plan["after, torch.compile"] = (copy.deepcopy(base), None, True, False)
        if low is not None:
            plan[f"after, {DTYPE_NAMES[low]} + compile"] = (copy.deepcopy(base), low, True, False)
    variants = {}
    for name, (model, dtype, compiled, sparse) in plan.items():
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4, betas=(0.9, 0.95)) if name == "before" else \
            make_optimizer(list(model.parameters()), 1e-4, device)
        variants[name] = (torch.compile(model) if compiled else model, opt, dtype, sparse)
    x = torch.randn(args.batch, 3, 36, 36, device=device)
    y = torch.randint(0, 10, (args.batch,), device=device)
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    for name, v in variants.items():  # warm-up (and compilation)
        for _ in range(2):
            step_time(*v, x, y)
    times: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(args.rounds):
        for name, v in variants.items():
            sync()
            for _ in range(args.steps):
                times[name].append(step_time(*v, x, y))
            sync()
    rows = {name: {"median_step_s": statistics.median(t), "img_per_s": args.batch / statistics.median(t)}
            for name, t in times.items()}
    ref = rows["before"]["img_per_s"]
    print(f"mLiT-{args.size.upper()} training step, batch {args.batch}, {device}, {torch.get_num_threads()} threads, "
          f"torch {torch.__version__}, {args.rounds}x{args.steps} steps each (median)")
    for name, r in rows.items():
        print(f"  {name:<24} {r['img_per_s']:8.1f} img/s   {r['median_step_s'] * 1e3:8.1f} ms/step   "
              f"{r['img_per_s'] / ref:5.2f}x before")
    layers = [] if args.no_layers else bench_layers(base.cfg, args.batch, args.rounds, args.steps, device)
    if layers:
        print(f"MoE layer alone (forward + backward, {args.batch}x{base.cfg.num_tokens} tokens, median)")
    for r in layers:
        print(f"  hidden {r['hidden']:>3}, {r['experts']} experts: dense {r['dense_ms']:7.1f} ms, per-expert dispatch "
              f"{r['dispatch_ms']:7.1f} ms, speed-up {r['speedup']:.2f}x")
    attention, rates = {}, {}
    if device.type == "cpu" and not args.no_layers:
        attention, rates = bench_attention(base.cfg, args.batch, args.rounds, args.steps), matmul_rates()
        print(f"Attention core alone, CPU (forward + backward, batch {args.batch}, one layer, median): "
              + ", ".join(f"{name} {ms:.1f} ms" for name, ms in attention.items()))
        print(f"Matmul 1024x1024 on this CPU: fp32 {rates['fp32']:.0f} GFLOP/s, bf16 {rates['bf16']:.0f} GFLOP/s")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"size": args.size, "batch": args.batch, "device": str(device), "torch": torch.__version__,
                       "cpu": platform.processor() or platform.machine(), "threads": torch.get_num_threads(),
                       "results": rows, "layers": layers, "attention_ms": attention,
                       "matmul_gflops": rates}, f, indent=2)


if __name__ == "__main__":
    main()
