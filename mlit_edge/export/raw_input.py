"""`--raw-input`: the normalisation folded into the patch embedding, so the graph takes RGB pixels in [0, 255].

The model computes conv(x) with x = (p / 255 - m_c) / s_c per channel c, and the patch embedding is a
stride-P, P x P convolution with no padding and (the paper's) no bias:

    conv(x)_o = sum_{c,i,j} W[o,c,i,j] * (p[c,i,j] / 255 - m_c) / s_c
              = sum_{c,i,j} (W[o,c,i,j] / (255 s_c)) * p[c,i,j]  -  sum_{c,i,j} W[o,c,i,j] * m_c / s_c

The second sum is the same constant for every patch only because every input position the kernel reads
is a real pixel: a padded convolution would read zeros at the border, where the constant does not apply
(a zero of the normalised image is the pixel 255 m_c, not 0). With no padding the fold is exact: a new
weight W / (255 s) and a bias b_o = -sum W m / s, computed in float64 and stored as float32. The dummy patch
is appended after the projection (`model.mlit.MLiT.embed`), so the bias does not reach it: it stays zero.
"""
from __future__ import annotations

from typing import Sequence

import torch
from torch import nn


def fold_normalisation(conv: nn.Conv2d, mean: Sequence[float], std: Sequence[float]) -> nn.Conv2d:
    """A new convolution taking pixels in [0, 255] that computes what `conv` computes on the normalised image
    ((pixel / 255 - mean) / std per channel); `conv` is untouched. Refuses a padded convolution (not exact)."""
    pad = conv.padding
    if pad == "same" or (not isinstance(pad, str) and any(p != 0 for p in pad)):
        raise ValueError(f"the patch embedding is padded ({conv.padding}): folding the normalisation into it would "
                         "not be exact at the border")
    if conv.groups != 1:
        raise ValueError("a grouped patch embedding: the fold needs every input channel in every output")
    c = conv.in_channels
    if len(mean) != c or len(std) != c or any(s <= 0 for s in std):
        raise ValueError(f"mean {list(mean)} and std {list(std)}: need {c} values each, std positive")
    w = conv.weight.detach().double()  # (O, C, P, P)
    m = torch.tensor(mean, dtype=torch.float64).view(1, c, 1, 1)
    s = torch.tensor(std, dtype=torch.float64).view(1, c, 1, 1)
    bias = -(w * m / s).sum(dim=(1, 2, 3))
    if conv.bias is not None:
        bias = bias + conv.bias.detach().double()
    folded = nn.Conv2d(c, conv.out_channels, conv.kernel_size, stride=conv.stride, padding=0, dilation=conv.dilation,
                       bias=True)
    with torch.no_grad():
        folded.weight.copy_((w / (255.0 * s)).to(conv.weight.dtype))
        folded.bias.copy_(bias.to(conv.weight.dtype))
    folded.requires_grad_(False)
    return folded.to(conv.weight.device)


def take_pixels(deployed: nn.Module, mean: Sequence[float], std: Sequence[float]) -> nn.Module:
    """`deployed` (a `static.DeployMLiT`) with its patch embedding folded: it now takes RGB pixels in [0, 255]."""
    deployed.patch_embed = fold_normalisation(deployed.patch_embed, mean, std)
    return deployed
