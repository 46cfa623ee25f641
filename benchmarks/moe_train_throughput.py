"""Training throughput of mLiT's MoE against a straightforward per-expert dispatch, side by side.

Both variants are the same model with the same weights: the project's dense form (all experts' W in
one matmul, shared V and W2 once) and the reference dispatch that gathers each expert's tokens, runs
that expert and scatters the result back (`sparse=True`). Rounds alternate between the two so that
machine noise hits both alike; the report is images per second and their ratio.

    python benchmarks/moe_train_throughput.py --size xxs --batch 64 --rounds 5
"""
from __future__ import annotations

import argparse
import copy
import json
import platform
import statistics
import time

import torch
import torch.nn.functional as F

from mlit_edge.model.mlit import create_model
from mlit_edge.model.moe import MoE


def step_time(model, opt, x, y, sparse: bool) -> float:
    start = time.perf_counter()
    logits, aux = model(x, return_aux=True, sparse=sparse)
    loss = F.cross_entropy(logits, y) + aux.loss
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


def bench_layers(cfg, batch: int, rounds: int, steps: int, device) -> list[dict]:
    """The MoE layers of the model alone, one per expert count (3, 4, 5), side by side."""
    rows = []
    seen = set()
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
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=5, help="alternating rounds per variant")
    ap.add_argument("--steps", type=int, default=3, help="timed steps per round")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--json", default=None, help="also write the results here")
    args = ap.parse_args()

    torch.manual_seed(0)
    device = torch.device(args.device)
    base = create_model(args.size, num_classes=10).to(device).train()
    variants = {"dense (mlit-edge)": False, "per-expert dispatch": True}
    models = {name: copy.deepcopy(base) for name in variants}
    opts = {name: torch.optim.AdamW(m.parameters(), lr=1e-4) for name, m in models.items()}
    x = torch.randn(args.batch, 3, 36, 36, device=device)
    y = torch.randint(0, 10, (args.batch,), device=device)
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)

    for name, sparse in variants.items():  # warm-up
        step_time(models[name], opts[name], x, y, sparse)
    times: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(args.rounds):
        for name, sparse in variants.items():
            sync()
            for _ in range(args.steps):
                times[name].append(step_time(models[name], opts[name], x, y, sparse))
            sync()

    rows = {name: {"median_step_s": statistics.median(t), "img_per_s": args.batch / statistics.median(t)}
            for name, t in times.items()}
    dense, sparse = rows["dense (mlit-edge)"], rows["per-expert dispatch"]
    ratio = dense["img_per_s"] / sparse["img_per_s"]
    print(f"mLiT-{args.size.upper()} training step, batch {args.batch}, {device}, "
          f"{torch.get_num_threads()} threads, {args.rounds}x{args.steps} steps each (median)")
    for name, r in rows.items():
        print(f"  {name:<22} {r['img_per_s']:8.1f} img/s   {r['median_step_s'] * 1e3:8.1f} ms/step")
    print(f"  speed-up of the dense MoE: {ratio:.2f}x")
    layers = bench_layers(base.cfg, args.batch, args.rounds, args.steps, device)
    print(f"MoE layer alone (forward + backward, {args.batch}x{base.cfg.num_tokens} tokens, median)")
    for r in layers:
        print(f"  hidden {r['hidden']:>3}, {r['experts']} experts: dense {r['dense_ms']:7.1f} ms, per-expert dispatch "
              f"{r['dispatch_ms']:7.1f} ms, speed-up {r['speedup']:.2f}x")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"size": args.size, "batch": args.batch, "device": str(device), "torch": torch.__version__,
                       "cpu": platform.processor() or platform.machine(), "threads": torch.get_num_threads(),
                       "results": rows, "speedup": ratio, "layers": layers}, f, indent=2)


if __name__ == "__main__":
    main()
