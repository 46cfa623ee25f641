"""The fidelity figures of the INT8 sweep (int8_sensitivity.py) beyond per-layer agreement: the agreement on the
tokens a router decides by a margin, and the fp16 variant's row for comparison."""
from __future__ import annotations

from pathlib import Path

import numpy as np


def decided_agreement(path: Path, model, images: np.ndarray, normalisation: tuple,
                      margins: tuple = (0.01, 0.05)) -> dict:
    """Per layer, the expert agreement on the tokens whose clean PyTorch router margin (k-th minus (k+1)-th gate
    logit) exceeds each of `margins`: a tie-free measure, since a token at margin ~0 flips on any rounding."""
    from mlit_edge.base.routing import routed_part
    from mlit_edge.export.onnx_export import ORT_SESSION, reference_outputs
    from mlit_edge.runtime.runners import OnnxRuntimeRunner, predict_all

    with OnnxRuntimeRunner(path, session=ORT_SESSION, expose_routing=True) as run:
        _, routes = predict_all(run, images, routes=True, normalised=normalisation)
    _, ref_routes, ref_margins = reference_outputs(model, images)
    out = {}
    for t in margins:
        per_layer, shares = [], []
        for got, want, margin in zip(routes, ref_routes, ref_margins):
            want, margin = routed_part(want, got.shape[1]), routed_part(margin, got.shape[1])
            k = got.shape[-1]
            same = np.all(np.sort(got.reshape(-1, k), 1) == np.sort(want.reshape(-1, k), 1), axis=1)
            keep = margin.reshape(-1) > t
            per_layer.append(float(same[keep].mean()) if keep.any() else 1.0)
            shares.append(float(keep.mean()))
        out[str(t)] = {"agreement": [round(a, 5) for a in per_layer], "worst": min(per_layer),
                       "worst_layer": int(np.argmin(per_layer)), "token_share": [round(x, 4) for x in shares]}
    return out


def fp16_row(flavour: str, src: Path, tmp: Path, model, held_out, fp32_top1: float) -> dict:
    """The fp16 variant of the same source, for comparison (LayerNorm, softmax, router and head in fp32)."""
    from mlit_edge.export.fp16 import to_fp16
    from mlit_edge.export.onnx_export import variant_parity
    from mlit_edge.export.variants import evaluate_onnx

    out = tmp / f"{flavour}-fp16.onnx"
    to_fp16(src, out)
    norm = (held_out.split.mean, held_out.split.std)
    images = held_out.sample()
    agree = variant_parity(out, model, images, normalisation=norm)["routing_agreement"]
    top1 = evaluate_onnx(out, held_out)["top1"]
    worst = int(np.argmin(agree))
    row = {"flavour": flavour, "choice": "fp16 (for comparison)", "method": "-", "float": [], "agreement": agree,
           "worst_layer": worst, "worst": agree[worst], "top1": top1, "delta_top1": top1 - fp32_top1,
           "int8_mac_share": 0.0, "share_vs_today": 0.0, "smooth": None, "meets": False,
           "decided": decided_agreement(out, model, images, norm)}
    print(f"  {flavour:11s} fp16 worst L{worst} {agree[worst]:.3f}  top-1 {top1:.3f}", flush=True)
    return row
