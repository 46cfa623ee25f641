"""The ceiling on what a model config may imply, checked by arithmetic before any tensor is made.

`implied_params` is exact for an `MLiTConfig` (the tests compare it with the built model); the ceilings
stop a config from a checkpoint or `--set` that asks for 10^5 layers or 10^6 experts in one line.
"""
from __future__ import annotations

import os

# [ours] what a config may imply before any tensor is made: far above every size here (S: 2.4M parameters,
# 0.44 GMAC an image), far below what exhausts a machine. A config read from a checkpoint or `--set` that asks
# for 10^5 layers or 10^6 experts is refused in one line instead of allocating gigabytes. A user who means it
# raises the ceiling through the environment.
MAX_PARAMS = 100_000_000
MAX_MACS = 50_000_000_000


def _ceiling(name: str, default: int) -> int:
    raw = os.environ.get(name)
    if raw is None:
        return default
    try:
        return int(float(raw))
    except (ValueError, OverflowError):
        raise ValueError(f"{name}={raw!r} is not a number") from None


def check_ceiling(what: str, params: int, macs: int) -> None:
    """ValueError when a config implies more parameters or multiply-adds an image than the ceilings allow."""
    max_params, max_macs = _ceiling("MLIT_EDGE_MAX_PARAMS", MAX_PARAMS), _ceiling("MLIT_EDGE_MAX_MACS", MAX_MACS)
    if params > max_params:
        raise ValueError(f"invalid {what}: it implies {params:.3g} parameters, over the ceiling of {max_params:.3g} "
                         "(set MLIT_EDGE_MAX_PARAMS to raise it)")
    if macs > max_macs:
        raise ValueError(f"invalid {what}: it implies {macs:.3g} multiply-adds an image, over the ceiling of "
                         f"{max_macs:.3g} (set MLIT_EDGE_MAX_MACS to raise it)")


def implied_params(cfg) -> int:
    """The parameter count of `MLiT(cfg)`, by arithmetic on the config alone (nothing is allocated)."""
    d, head_dim = cfg.dim, cfg.dim // cfg.heads
    total = cfg.in_chans * d * cfg.patch_size ** 2 + cfg.num_tokens * d + 2 * d
    total += d * cfg.num_classes + cfg.num_classes
    layers = zip(cfg.hidden_sizes(), cfg.experts_per_layer()) if cfg.depth <= 100_000 else ()
    attention = d * (cfg.heads + 2 * cfg.groups) * head_dim + d * d + 4 * d
    if cfg.attn_bias:
        attention += (cfg.heads + 2 * cfg.groups) * head_dim + d
    if not layers:  # too deep to list: a lower bound is enough to refuse it
        return total + cfg.depth * attention
    for hidden, experts in layers:
        n = {m: 1 if m in cfg.shared else experts for m in ("w", "v", "w2")}
        total += attention + d * experts * (2 if cfg.noisy_gating else 1)
        total += (d + 1) * hidden * (n["w"] + n["v"]) + n["w2"] * (hidden + 1) * d
    return total


def implied_macs(cfg) -> int:
    """Multiply-adds of one image through `MLiT(cfg)`, roughly: every weight once a token, plus attention."""
    n = cfg.num_tokens
    return n * implied_params(cfg) + cfg.depth * 2 * n * n * cfg.dim


def batch_bytes(cfg, batch: int) -> int:
    """About what the buffers of one call of `MLiT(cfg)` at `batch` take (input, attention scores, token
    activations); a bound for refusing early, not a measurement."""
    n, s = cfg.num_tokens, cfg.img_size
    per_image = 3 * s * s + 3 * cfg.heads * n * n + n * (8 * cfg.dim + 2 * max(cfg.expert_stages) * cfg.hidden_first)
    return int(1.5 * 4 * per_image * batch)  # float32, with headroom for the runtime's own copies


def available_mb() -> float | None:
    """Memory the kernel says new allocations can get without swapping (MemAvailable); None elsewhere."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) / 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def check_batch_fits(cfg, batch: int, option: str = "--batch") -> None:
    """ValueError, before anything is allocated, when one call at `batch` would not fit the memory this
    machine has available (80% of MemAvailable)."""
    available = available_mb()
    need = batch_bytes(cfg, batch) / 2 ** 20
    if available is not None and need > 0.8 * available:
        raise ValueError(f"{option} {batch}: one call needs about {need / 1024:.1f} GiB of buffers (estimated), more "
                         f"than the {available / 1024:.1f} GiB available here; use a smaller batch")
