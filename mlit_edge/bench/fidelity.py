"""How an artifact's outputs compare with the PyTorch reference's on the same preprocessed images:
top-1 of both, prediction agreement, max/mean abs logit error, cosine similarity, and per-layer
routing agreement (`runtime.runners.routing_agreement`, which the build uses too)."""
from __future__ import annotations

import numpy as np


def predicted(logits: np.ndarray) -> np.ndarray:
    """Each row's class, or -1 (no label) where the row holds NaN or infinity: argmax takes NaN for the
    maximum, so logits that are all NaN would count as class 0 (predict refuses them)."""
    return np.where(np.isfinite(logits).all(axis=1), logits.argmax(1), -1)


def fidelity(logits: np.ndarray, ref: np.ndarray, labels: np.ndarray | None = None) -> dict:
    """How `logits` compare with the reference's: exact zeros/ones for identical outputs."""
    logits, ref = logits.astype(np.float64), ref.astype(np.float64)
    err = np.abs(logits - ref)
    norms = np.linalg.norm(logits, axis=1) * np.linalg.norm(ref, axis=1)
    same = np.all(logits == ref, axis=1)
    cos = np.where(same, 1.0, (logits * ref).sum(1) / np.where(norms == 0, 1.0, norms))
    out = {"max_abs_err": float(err.max()), "mean_abs_err": float(err.mean()),
           "cosine": float(np.clip(cos, -1.0, 1.0).mean()),
           "agreement": float((predicted(logits) == predicted(ref)).mean())}
    if labels is not None:
        out["top1"] = float((predicted(logits) == labels).mean())
        out["top1_reference"] = float((predicted(ref) == labels).mean())
        out["top1_delta"] = out["top1"] - out["top1_reference"]
    return out
