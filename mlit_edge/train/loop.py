"""Training as plain functions: the paper's lr schedule, one epoch of training, evaluation."""
from __future__ import annotations

import contextlib
import math
import time
from typing import Callable

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .data import Loader


def lr_at(step: int, total_steps: int, base_lr: float, warmup_steps: int, min_lr: float = 0.0) -> float:
    """[paper] linear warm-up over the first steps, then cosine decay to `min_lr`."""
    if warmup_steps > 0 and step < warmup_steps:
        return base_lr * (step + 1) / warmup_steps
    progress = (step - warmup_steps) / max(1, total_steps - warmup_steps)
    return min_lr + (base_lr - min_lr) * 0.5 * (1.0 + math.cos(math.pi * min(1.0, progress)))


def scaled_lr(batch_size: int, base_lr: float = 3e-4) -> float:
    """[paper] Eq. 4: lr = base_lr * batch_size / 256 (batch_size is the global batch)."""
    return base_lr * batch_size / 256


NO_DECAY = {"b", "c", "d", "pos_embed", "mask_token"}  # the expert biases are stacked, so 2-D


def param_groups(model: nn.Module, weight_decay: float) -> list[dict]:
    """AdamW groups [ours, as MAE/timm]: no decay on biases, norms, embeddings and the mask token."""
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        if not p.requires_grad:
            continue
        skip = p.ndim <= 1 or name.rsplit(".", 1)[-1] in NO_DECAY
        (no_decay if skip else decay).append(p)
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]


def make_optimizer(groups: list[dict] | list[Tensor], lr: float, device: torch.device) -> torch.optim.AdamW:
    """[ours] AdamW with betas (0.9, 0.95) as MAE's and most ViT recipes (the paper names AdamW only), as one
    fused kernel per step on CPU and CUDA (the same update as the default per-tensor loop)."""
    return torch.optim.AdamW(groups, lr=lr, betas=(0.9, 0.95), fused=device.type in ("cpu", "cuda"))


def autocast(device: torch.device, dtype: torch.dtype | None):
    """Mixed precision context: fp16 on CUDA, bf16 where asked, nothing for fp32."""
    if dtype is None:
        return contextlib.nullcontext()
    return torch.autocast(device_type=device.type, dtype=dtype)


def noise_scale_at(step: int, total_steps: int, schedule: str) -> float:
    """The gate-noise multiplier at `step`: 1 throughout [paper], or annealed along a half cosine from 1
    at the first step to 0 at the last ("cosine") [ours], so training ends on the routing deployed."""
    if schedule == "constant":
        return 1.0
    return 0.5 * (1.0 + math.cos(math.pi * min(1.0, step / max(1, total_steps - 1))))


def set_noise_scale(model: nn.Module, scale: float) -> None:
    """Set every gate's noise multiplier (a buffer, so a compiled model reads it without recompiling)."""
    from ..model.gating import NoisyTopKGate

    for m in model.modules():
        if isinstance(m, NoisyTopKGate):
            m.noise_scale.fill_(scale)


class RoutingStats:
    """Routing health per MoE layer, accumulated over batches (docs/training.md, "Routing health"):
    the share of token slots each expert got under the routing that was used (noisy in training),
    under the clean routing (what the deployed graph does) and under one noisy draw; the share of
    tokens whose noisy and clean top-k sets agree; the median ratio of the margin that decides a
    token's top-k (k-th minus (k+1)-th clean logit) to its mean noise std; and the entropy of the
    clean shares over log(E) (1 when every expert gets the same share)."""

    def __init__(self, experts_per_layer: list[int]) -> None:
        self.sizes = experts_per_layer
        zeros = lambda: [torch.zeros(n, dtype=torch.float64) for n in experts_per_layer]  # noqa: E731
        self.used, self.clean, self.noisy = zeros(), zeros(), zeros()
        self.agree = [0.0] * len(experts_per_layer)
        self.tokens = [0] * len(experts_per_layer)
        self.ratios: list[list[Tensor]] = [[] for _ in experts_per_layer]

    def update(self, routings: list) -> None:
        for i, (r, n) in enumerate(zip(routings, self.sizes)):
            for acc, idx in ((self.used, r.top_i), (self.clean, r.clean_i), (self.noisy, r.noisy_i)):
                acc[i] += torch.bincount(idx.detach().flatten().cpu(), minlength=n).double()
            same = (r.noisy_i.sort(-1).values == r.clean_i.sort(-1).values).all(-1)
            self.agree[i] += float(same.sum())
            self.tokens[i] += len(same)
            if r.noise_std is not None:  # no ratio where the noise is off (scale 0) or a margin is undefined
                keep = (r.noise_std > 0) & torch.isfinite(r.margin)
                self.ratios[i].append((r.margin[keep] / r.noise_std[keep]).detach().float().cpu())

    @staticmethod
    def _shares(counts: list[Tensor]) -> list[list[float]]:
        return [[round(v, 5) for v in (c / c.sum().clamp_min(1)).tolist()] for c in counts]

    def fractions(self) -> list[list[float]]:
        """Per layer, the share of routed token slots each expert took under the routing used."""
        return self._shares(self.used) if any(self.tokens) else []

    def summary(self) -> dict:
        """Per layer: clean and noisy shares, noisy-vs-clean agreement, median gap/noise, clean entropy."""
        if not any(self.tokens):
            return {}
        clean = self._shares(self.clean)
        entropy = [float(-(p * p.clamp_min(1e-12).log()).sum() / math.log(len(p))) if len(p) > 1 else 1.0
                   for p in (torch.tensor(c, dtype=torch.float64) for c in clean)]
        return {"clean": clean, "noisy": self._shares(self.noisy),
                "agreement": [round(a / max(t, 1), 5) for a, t in zip(self.agree, self.tokens)],
                "gap_noise": [round(float(torch.cat(r).median()), 5) if r and sum(map(len, r)) else None
                              for r in self.ratios],
                "entropy": [round(e, 5) for e in entropy]}


def _task_step(model: nn.Module, x: Tensor, y: Tensor, task: str) -> tuple[Tensor, dict, list[Tensor]]:
    """Loss, per-batch statistics and routing for a supervised or a masked auto-encoder batch."""
    if task == "pretrain":
        out = model(x)
        return out.loss, {"mse_masked": out.mse_masked.detach(), "moe_loss": out.moe_loss.detach()}, out.routings
    logits, aux = model(x, return_aux=True)
    ce = F.cross_entropy(logits.float(), y)
    correct = (logits.argmax(-1) == y).sum()
    return ce + aux.loss, {"ce": ce.detach(), "moe_loss": aux.loss.detach(), "correct": correct}, aux.routings


def train_one_epoch(model: nn.Module, loader: Loader, optimizer: torch.optim.Optimizer,
                    scheduler: torch.optim.lr_scheduler.LRScheduler, scaler: torch.amp.GradScaler | None,
                    task: str, counter: RoutingStats, amp_dtype: torch.dtype | None = None,
                    clip_grad: float | None = None, progress: bool = True, desc: str = "",
                    noise_scale: Callable[[int], float] | None = None, gates_of: nn.Module | None = None) -> dict:
    """One pass over `loader`; returns mean loss (and accuracy for supervised), img/s, lr and the gate-noise
    scale. `noise_scale(step)` sets the gates' noise multiplier of `gates_of` (the model) before each step."""
    from tqdm import tqdm

    model.train()
    device = loader.device
    sums: dict[str, Tensor] = {}
    seen, start = 0, time.perf_counter()
    bar = tqdm(loader, desc=desc, disable=not progress, dynamic_ncols=True, leave=False)
    scale = 1.0
    for x, y in bar:
        if noise_scale is not None:
            scale = noise_scale(scheduler.last_epoch)
            set_noise_scale(gates_of, scale)
        with autocast(device, amp_dtype):
            loss, stats, routings = _task_step(model, x, y, task)
        if not torch.isfinite(loss):
            raise FloatingPointError(f"loss became {loss.item()} at step {scheduler.last_epoch}; "
                                     "lower the learning rate or use --amp off")
        optimizer.zero_grad(set_to_none=True)
        if scaler is not None:
            scaler.scale(loss).backward()
            scaler.unscale_(optimizer)
        else:
            loss.backward()
        if clip_grad:
            nn.utils.clip_grad_norm_(model.parameters(), clip_grad)
        if scaler is not None:
            scaler.step(optimizer)
            scaler.update()
        else:
            optimizer.step()
        scheduler.step()
        counter.update(routings)
        n = x.shape[0]
        seen += n
        for k, v in {"loss": loss.detach(), **stats}.items():
            sums[k] = sums.get(k, 0) + (v if k == "correct" else v * n)
        if progress and (bar.n % 5 == 0 or bar.n == len(loader) - 1):
            post = {"loss": f"{sums['loss'].item() / seen:.4f}",
                    "img/s": f"{seen / (time.perf_counter() - start):.0f}"}
            if "correct" in sums:
                post["acc"] = f"{sums['correct'].item() / seen:.3f}"
            bar.set_postfix(post)
    elapsed = time.perf_counter() - start
    out = {k: (v.item() / max(seen, 1)) for k, v in sums.items() if k != "correct"}
    if "correct" in sums:
        out["acc"] = sums["correct"].item() / max(seen, 1)
    out.update(images=seen, seconds=elapsed, img_per_s=seen / max(elapsed, 1e-9),
               lr=optimizer.param_groups[0]["lr"], noise_scale=scale)
    return out


@torch.no_grad()
def evaluate(model: nn.Module, loader: Loader, amp_dtype: torch.dtype | None = None,
             counter: RoutingStats | None = None) -> dict:
    """Top-1 accuracy and cross-entropy of a classifier over `loader` (eval mode, no noise); routing is
    counted into `counter` when one is given."""
    model.eval()
    correct, loss_sum, seen = 0, 0.0, 0
    for x, y in loader:
        with autocast(loader.device, amp_dtype):
            logits, aux = model(x, return_aux=True)
        if counter is not None:
            counter.update(aux.routings)
        loss_sum += F.cross_entropy(logits.float(), y, reduction="sum").item()
        correct += (logits.argmax(-1) == y).sum().item()
        seen += len(y)
    return {"acc": correct / max(seen, 1), "loss": loss_sum / max(seen, 1), "images": seen}
