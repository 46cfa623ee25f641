"""Expert-routing metrics: how far an artifact's per-layer expert choices agree with the reference's.

Each layer's routing is (images, tokens, k) expert indices. A layer may route only the last tokens of
each image (ONNX Runtime's flavour computes its last layer for the dummy token alone); it is compared
with the reference on those tokens. Export, calibration and bench share these, so the rule lives once.
"""
from __future__ import annotations

import numpy as np


def routed_part(reference: np.ndarray, tokens: int) -> np.ndarray:
    """The part of a reference (images, all tokens, ...) that a layer routing only `tokens` tokens an image
    computes: the last ones (ONNX Runtime's flavour computes its last layer for the dummy token alone)."""
    return reference[:, reference.shape[1] - tokens:]


def partial_layers(routed_tokens: list[int] | None, layers: int) -> list[bool]:
    """Which layers route fewer tokens an image than the others (the fused graph's last layer)."""
    routed = routed_tokens or [0] * layers
    return [t < max(routed) for t in routed]


def routing_agreement(routes: list[np.ndarray], ref_routes: list[np.ndarray]) -> list[float]:
    """Per layer: the share of tokens whose set of top-k experts equals the reference's. Each is (images,
    tokens, k); a layer that routes only the last tokens of each image (ONNX Runtime's flavour computes
    its last layer for the dummy token alone) is compared on those."""
    if len(routes) != len(ref_routes):
        raise ValueError(f"{len(routes)} routed layers vs {len(ref_routes)} in the reference")
    out = []
    for got, want in zip(routes, ref_routes):
        if got.ndim == want.ndim == 3 and got.shape[1] < want.shape[1]:
            want = routed_part(want, got.shape[1])
        k = got.shape[-1]
        g, w = np.sort(got.reshape(-1, k), axis=1), np.sort(want.reshape(-1, k), axis=1)
        out.append(float(np.all(g == w, axis=1).mean()))
    return out
