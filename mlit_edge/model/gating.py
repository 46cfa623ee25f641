"""Noisy top-k gating (Shazeer et al. 2017) as the mLiT paper writes it, with the variants of the
routing ablation as options (docs/training.md, "Routing health"): `init="zero"` starts W_g and W_noise at zero
as Shazeer does, and a `noise_scale` buffer lets training anneal the noise.

Every call also reports the routing's health: the clean (noise-free) top-k, which is what the deployed
graph chooses, one noisy draw of it, the margin that decides it (k-th minus (k+1)-th clean logit) and
the noise that competes with that margin.
Letters: T tokens (the batch and sequence flattened, the paper's b*n), M embedding size,
E experts (the paper's t), K experts chosen per token.
"""
from __future__ import annotations

import math
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn


def softmax_k(h: Tensor, k: int) -> tuple[Tensor, Tensor]:
    """Softmax_k of the paper: a softmax over each row's top-k entries, every other entry 0.

    Returns the dense (T, E) gates and the (T, K) indices of the chosen experts.
    """
    top_v, top_i = h.topk(k, dim=-1)  # (T, K), descending
    gates = torch.zeros_like(h).scatter(-1, top_i, top_v.softmax(dim=-1))
    return gates, top_i


def psi(h: Tensor, k: int) -> Tensor:
    """Psi(H) of the paper: per row, the (k+1)-th largest where h >= the k-th largest, else the k-th.

    It is the threshold each entry's noisy logit has to beat to be (or stay) in the top k.
    Needs E > k.
    """
    top_v = h.topk(k + 1, dim=-1).values  # (T, K+1)
    l_k, l_k1 = top_v[:, k - 1 : k], top_v[:, k : k + 1]  # (T, 1) each
    return torch.where(h >= l_k, l_k1, l_k)


def prob_in_top_k(clean: Tensor, noisy: Tensor, noise_std: Tensor, k: int) -> Tensor:
    """P(x) = Phi((x Wg - Psi(H)) / softplus(x Wnoise)): the chance that each expert is in the top k
    under a fresh draw of the noise, differentiable in Wg and Wnoise."""
    z = (clean - psi(noisy, k)) / noise_std.clamp_min(1e-6)  # an annealed noise may reach zero
    return 0.5 * (1.0 + torch.erf(z / math.sqrt(2.0)))  # Phi, the standard normal CDF


def coefficient_of_variation(x: Tensor, squared: bool = False, eps: float = 1e-10) -> Tensor:
    """CV = std / mean of a vector; CV^2 when `squared`. [ours] The population variance, as Shazeer's
    reference `cv_squared`; the paper does not say which."""
    if x.numel() < 2:
        return x.new_zeros(())
    x = x.float()
    var = x.var(unbiased=False)
    mean = x.mean()
    return var / (mean**2 + eps) if squared else var.sqrt() / (mean + eps)


class Routing(NamedTuple):
    """What a gate decides for T tokens, and how healthy that decision is."""

    gates: Tensor  # (T, E) sparse: K non-zeros per row that sum to 1
    top_i: Tensor  # (T, K) chosen experts, most weighted first
    loss: Tensor  # () balancing loss L = L_importance + L_load of this layer
    clean_i: Tensor  # (T, K) the noise-free choice: what the deployed graph makes
    noisy_i: Tensor  # (T, K) one draw under the training noise (in eval: a fixed-seed draw, for statistics)
    margin: Tensor  # (T,) k-th minus (k+1)-th clean logit; inf when K = E
    noise_std: Tensor | None  # (T,) mean noise std over the experts; None without W_noise


def routing_health(clean: Tensor, noise_std: Tensor | None, k: int, noisy_i: Tensor | None = None,
                   seed: int = 0) -> tuple[Tensor, Tensor, Tensor, Tensor | None]:
    """(clean top-k, noisy top-k, margin, mean noise std) of clean logits (T, E) and their noise std
    (T, E). `noisy_i`: the training draw's top-k when there is one; else one draw is made from a
    private generator, so statistics never move the training's random streams."""
    top = clean.topk(min(k + 1, clean.shape[-1]), dim=-1)
    margin = top.values[:, k - 1] - top.values[:, k] if clean.shape[-1] > k else clean.new_full(clean.shape[:1],
                                                                                               math.inf)
    if noise_std is None:
        return top.indices[:, :k], top.indices[:, :k], margin, None
    if noisy_i is None:
        gen = torch.Generator(device=clean.device).manual_seed(seed)
        noisy_i = (clean + torch.randn(clean.shape, generator=gen, device=clean.device) * noise_std).topk(k).indices
    return top.indices[:, :k], noisy_i, margin, noise_std.mean(-1)


class NoisyTopKGate(nn.Module):
    """G(x) = Softmax_k(H(x)) with H(x) = x Wg + s * randn * softplus(x Wnoise); noise in training only.

    `s` is the `noise_scale` buffer, 1 unless a training schedule anneals it (`train.loop.noise_scale_at`).
    """

    def __init__(self, dim: int, experts: int, k: int = 2, noisy: bool = True, noise_eps: float = 1e-2,
                 balance: str = "cv", w_importance: float = 1e-2, w_load: float = 1e-2, init: str = "default") -> None:
        super().__init__()
        if not 1 <= k <= experts:
            raise ValueError(f"k={k} must be between 1 and the number of experts ({experts})")
        self.experts, self.k, self.noisy, self.noise_eps = experts, k, noisy, noise_eps
        self.squared = balance == "cv2"
        self.w_importance, self.w_load = w_importance, w_load
        # [paper] Wg and Wnoise are (m, t) matrices without bias; PyTorch's default Linear init, or zero
        # as Shazeer et al. initialise them (`init="zero"`)
        self.w_gate = nn.Linear(dim, experts, bias=False)
        self.w_noise = nn.Linear(dim, experts, bias=False) if noisy else None
        if init == "zero":
            for lin in (self.w_gate, self.w_noise):
                if lin is not None:
                    nn.init.zeros_(lin.weight)
        self.register_buffer("noise_scale", torch.ones(()), persistent=False)

    def forward(self, x: Tensor) -> Routing:
        """Route x (T, M). The router always runs in fp32, also under autocast."""
        with torch.autocast(device_type=x.device.type, enabled=False):
            return self._route(x.float())

    def _route(self, x: Tensor) -> Routing:
        clean = self.w_gate(x)  # (T, E)
        noise_std = None if self.w_noise is None else \
            self.noise_scale * (F.softplus(self.w_noise(x)) + self.noise_eps)  # (T, E)
        use_noise = self.training and noise_std is not None
        noisy = clean + torch.randn_like(clean) * noise_std if use_noise else clean
        gates, top_i = softmax_k(noisy, self.k)
        if use_noise and self.k < self.experts:
            load = prob_in_top_k(clean, noisy, noise_std, self.k).sum(0)  # sum_0 P(x), (E,)
        else:
            # Without noise P is a step function; count the tokens per expert instead, as Shazeer.
            load = (gates > 0).float().sum(0)
        importance = gates.sum(0)  # sum_0 G(x), (E,)
        loss = (self.w_importance * coefficient_of_variation(importance, self.squared)
                + self.w_load * coefficient_of_variation(load, self.squared))
        with torch.no_grad():
            clean_i, noisy_i, margin, mean_std = routing_health(clean, noise_std, self.k, top_i if use_noise else None)
        return Routing(gates, top_i, loss, clean_i, noisy_i, margin, mean_std)
