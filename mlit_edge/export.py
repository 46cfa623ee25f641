"""Checkpoint -> `to_deploy` -> ONNX (dynamo exporter, opset 18-20), checked against PyTorch at once.

The ONNX carries its provenance twice: in `metadata_props` (travels with the file) and in the
`model.onnx.json` sidecar. Every export runs itself through ONNX Runtime and compares with the
eval-mode PyTorch model before it is declared done.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch

from . import __version__
from .checkpoint import load_checkpoint, model_from_checkpoint
from .config import get_config
from .deploy import to_deploy
from .model import MLiT
from .quiet import quiet
from .runners import OnnxRuntimeRunner, TorchRunner
from .sidecar import atomic_path, sha256_file, write_sidecar

OPSETS = (18, 19, 20)  # 17 falls back to 18 in the dynamo exporter; 23+ emits an Attention op TensorRT lacks
INPUT = "images"
PARITY_TOL = 1e-4


def output_names(depth: int, probe: bool) -> list[str]:
    return ["logits"] + ([f"experts_{i}" for i in range(depth)] if probe else [])


def load_for_export(checkpoint: str | None, size: str | None, num_classes: int = 10) -> tuple[MLiT, dict]:
    """The classifier to export and what its sidecar records about it.

    Without a checkpoint the weights are random (fine for latency work, meaningless for accuracy).
    """
    if checkpoint:
        ckpt = load_checkpoint(checkpoint, kind="mlit")
        model = model_from_checkpoint(ckpt)
        if size and ckpt.get("size") not in (None, size):
            raise ValueError(f"{checkpoint} holds an mLiT-{str(ckpt.get('size')).upper()}, not {size.upper()}; "
                             "drop --size or pass the matching checkpoint")
        data = ckpt["data"]
        source = {"checkpoint": str(checkpoint), "checkpoint_sha256": sha256_file(checkpoint), "random_weights": False}
        size = ckpt.get("size")
    else:
        if not size:
            raise ValueError("give --checkpoint or --size")
        torch.manual_seed(0)
        model = MLiT(get_config(size, num_classes=num_classes))
        data = {"name": None, "classes": [str(i) for i in range(num_classes)], "mean": [0.5] * 3,
                "std": [0.5] * 3, "img_size": model.cfg.img_size}
        source = {"checkpoint": None, "checkpoint_sha256": None, "random_weights": True}
    cfg = model.cfg
    info = {"model": {"kind": "mlit", "size": size, "config": {k: getattr(cfg, k) for k in cfg.__dataclass_fields__},
                      "params": sum(p.numel() for p in model.parameters())},
            "classes": data["classes"],
            "preprocess": {"size": data.get("img_size", cfg.img_size), "mean": data["mean"], "std": data["std"],
                           "resize": "antialiased bilinear, then uint8 rounding (mlit_edge.preprocess)",
                           "layout": "NCHW float32", "dataset": data.get("name")},
            **source}
    return model.eval(), info


def export_onnx(model: MLiT, out: str | Path, info: dict, opset: int = 18, batch: int | None = None,
                probe: bool = False, check: bool = True) -> dict:
    """Export `model` to `out` (atomically) with its sidecar; returns the sidecar record.

    `batch=None` makes the batch dimension dynamic; an int fixes it. With `probe`, the graph also
    outputs every layer's top-k expert indices.
    """
    import onnx

    if opset not in OPSETS:
        raise ValueError(f"opset {opset} is not supported: use one of {OPSETS} (TensorRT-buildable, native LayerNorm)")
    if batch is not None and batch < 1:
        raise ValueError("batch must be at least 1")
    out = Path(out)
    deployed = to_deploy(model, probe=probe)
    names = output_names(model.cfg.depth, probe)
    example = torch.zeros(batch or 2, model.cfg.in_chans, model.cfg.img_size, model.cfg.img_size)
    dynamic = None if batch else ({0: torch.export.Dim("batch", min=1, max=4096)},)
    with atomic_path(out) as tmp, quiet():
        program = torch.onnx.export(deployed, (example,), dynamo=True, opset_version=opset, dynamic_shapes=dynamic,
                                    input_names=[INPUT], output_names=names, verbose=False)
        proto = program.model_proto
        meta = {"mlit_edge_version": __version__, "precision": "fp32", "classes": info["classes"],
                "preprocess": info["preprocess"], "model": info["model"]}
        onnx.helper.set_model_props(proto, {"mlit_edge": json.dumps(meta)})
        onnx.save(proto, str(tmp))
        parity = verify_onnx(tmp, model, batch, probe) if check else None
    record = {**info, "precision": "fp32", "opset": opset, "batch": batch or "dynamic", "probe": probe,
              "inputs": {INPUT: ["batch" if batch is None else batch, model.cfg.in_chans, model.cfg.img_size,
                                 model.cfg.img_size]},
              "outputs": names, "parity": parity, "torch_version": torch.__version__, "onnx_version": onnx.__version__}
    write_sidecar(out, record)
    return record


def verify_onnx(path: str | Path, model: MLiT, batch: int | None, probe: bool, seed: int = 0) -> dict:
    """Max abs logit error of ONNX Runtime against the eval-mode PyTorch model, and routing equality."""
    sizes = [batch] if batch else [1, 8]
    rng = np.random.default_rng(seed)
    worst, scale, routing_equal = 0.0, 1.0, True
    names = output_names(model.cfg.depth, probe)
    with OnnxRuntimeRunner(path) as ort_run, TorchRunner(model, ["logits"]) as ref_run, \
            TorchRunner(to_deploy(model, probe=True), output_names(model.cfg.depth, True)) as route_run:
        for b in sizes:
            x = rng.standard_normal((b, model.cfg.in_chans, model.cfg.img_size, model.cfg.img_size), np.float32)
            got = ort_run.infer({INPUT: x})
            want_logits = ref_run.infer({INPUT: x})["logits"]
            worst = max(worst, float(np.abs(got["logits"] - want_logits).max()))
            scale = max(scale, float(np.abs(want_logits).max()))
            if probe:
                want = route_run.infer({INPUT: x})
                routing_equal &= all(np.array_equal(got[n], want[n]) for n in names[1:])
    limit = PARITY_TOL * scale  # fp32 error grows with the logits' magnitude (trained models: a few units)
    if worst > limit or not routing_equal:
        raise RuntimeError(f"exported graph disagrees with PyTorch: max abs logit error {worst:.2e} "
                           f"(limit {limit:.1e} = {PARITY_TOL:.0e} x max |logit|), routing equal: {routing_equal}")
    return {"max_abs_err": worst, "limit": limit, "max_abs_logit": scale, "batches": sizes, "routing_equal": routing_equal if probe else None,
            "reference": "eval-mode PyTorch model, fp32"}


def variant_parity(path: str | Path, model: MLiT, images: np.ndarray) -> dict:
    """How an fp16/INT8 variant compares with the fp32 PyTorch model on real images: max and mean abs
    logit error and top-1 agreement. Recorded in the variant's sidecar."""
    from .sidecar import read_sidecar, user_fields

    with OnnxRuntimeRunner(path) as run, TorchRunner(model, ["logits"]) as ref:
        got, want = run.infer({INPUT: images})["logits"], ref.infer({INPUT: images})["logits"]
    err = np.abs(got - want)
    parity = {"max_abs_err": float(err.max()), "mean_abs_err": float(err.mean()),
              "top1_agreement": float((got.argmax(-1) == want.argmax(-1)).mean()), "images": int(len(images)),
              "reference": "eval-mode PyTorch model, fp32"}
    write_sidecar(path, {**user_fields(read_sidecar(path)), "parity": parity})
    return parity

