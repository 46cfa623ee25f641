"""Training as plain functions: the paper's lr schedule, one epoch of training, evaluation."""
from __future__ import annotations

import contextlib
import math
import time

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


def autocast(device: torch.device, dtype: torch.dtype | None):
    """Mixed precision context: fp16 on CUDA, bf16 where asked, nothing for fp32."""
    if dtype is None:
        return contextlib.nullcontext()
    return torch.autocast(device_type=device.type, dtype=dtype)


class ExpertCounter:
    """Counts, per MoE layer, how many token slots each expert received."""

    def __init__(self, experts_per_layer: list[int]) -> None:
        self.sizes = experts_per_layer
        self.counts: list[Tensor] | None = None

    def update(self, experts: list[Tensor]) -> None:
        counts = [torch.bincount(e.flatten(), minlength=n) for e, n in zip(experts, self.sizes)]
        self.counts = counts if self.counts is None else [a + b for a, b in zip(self.counts, counts)]

    def fractions(self) -> list[list[float]]:
        """Per layer, the fraction of routed token slots each expert took (each row sums to 1)."""
        if self.counts is None:
            return []
        return [[round(v, 5) for v in (c.double() / c.sum().clamp_min(1)).tolist()] for c in self.counts]


def _task_step(model: nn.Module, x: Tensor, y: Tensor, task: str) -> tuple[Tensor, dict, list[Tensor]]:
    """Loss, per-batch statistics and routing for a supervised or a masked auto-encoder batch."""
    if task == "pretrain":
        out = model(x)
        return out.loss, {"mse_masked": out.mse_masked.detach(), "moe_loss": out.moe_loss.detach()}, out.experts
    logits, aux = model(x, return_aux=True)
    ce = F.cross_entropy(logits.float(), y)
    correct = (logits.argmax(-1) == y).sum()
    return ce + aux.loss, {"ce": ce.detach(), "moe_loss": aux.loss.detach(), "correct": correct}, aux.experts


def train_one_epoch(model: nn.Module, loader: Loader, optimizer: torch.optim.Optimizer,
                    scheduler: torch.optim.lr_scheduler.LRScheduler, scaler: torch.amp.GradScaler | None,
                    task: str, counter: ExpertCounter, amp_dtype: torch.dtype | None = None,
                    clip_grad: float | None = None, progress: bool = True, desc: str = "") -> dict:
    """One pass over `loader`; returns mean loss (and accuracy for supervised), img/s and lr."""
    from tqdm import tqdm

    model.train()
    device = loader.device
    sums: dict[str, Tensor] = {}
    seen, start = 0, time.perf_counter()
    bar = tqdm(loader, desc=desc, disable=not progress, dynamic_ncols=True, leave=False)
    for x, y in bar:
        with autocast(device, amp_dtype):
            loss, stats, experts = _task_step(model, x, y, task)
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
        counter.update([e.detach() for e in experts])
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
               lr=optimizer.param_groups[0]["lr"])
    return out


@torch.no_grad()
def evaluate(model: nn.Module, loader: Loader, amp_dtype: torch.dtype | None = None,
             counter: ExpertCounter | None = None) -> dict:
    """Top-1 accuracy and cross-entropy of a classifier over `loader` (eval mode, no noise); routing is
    counted into `counter` when one is given."""
    model.eval()
    correct, loss_sum, seen = 0, 0.0, 0
    for x, y in loader:
        with autocast(loader.device, amp_dtype):
            logits, aux = model(x, return_aux=True)
        if counter is not None:
            counter.update(aux.experts)
        loss_sum += F.cross_entropy(logits.float(), y, reduction="sum").item()
        correct += (logits.argmax(-1) == y).sum().item()
        seen += len(y)
    return {"acc": correct / max(seen, 1), "loss": loss_sum / max(seen, 1), "images": seen}
