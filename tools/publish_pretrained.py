"""Ship a finished training run as a pretrained model of the package (maintainers only).

Writes the run's weights, config and data (no optimizer state) to `mlit_edge/weights/NAME.pt`,
evaluates that file as `mlit-edge eval` does, and records its sha256, metrics and the exact command
that trained it in `mlit_edge/weights/index.json`:

    python tools/publish_pretrained.py runs/xxs-mnist5k xxs-mnist5k --command "mlit-edge train ..."
"""
from __future__ import annotations

import argparse
import hashlib
import json
from pathlib import Path

import torch

from mlit_edge.train import pretrained
from mlit_edge.train.checkpoint import load_checkpoint, make_checkpoint, model_from_checkpoint, save_atomic
from mlit_edge.train.eval_checkpoint import evaluate_checkpoint


def add(run_dir: str | Path, name: str, command: str, default: bool = True) -> dict:
    """Ship the checkpoint of a finished training run as pretrained NAME: weights, config and data only."""
    run_dir = Path(run_dir)
    ckpt = load_checkpoint(run_dir / "checkpoint.pt", kind="mlit")
    model = model_from_checkpoint(ckpt)
    lean = make_checkpoint("mlit", model, model.cfg, ckpt["size"], ckpt["data"], epoch=ckpt["epoch"],
                           metrics={k: ckpt["metrics"][k] for k in ("epoch", "test", "routing")})
    pretrained.WEIGHTS.mkdir(exist_ok=True)
    path = pretrained.WEIGHTS / f"{name}.pt"
    save_atomic(lean, path)
    result = evaluate_checkpoint(str(path))
    models = pretrained.index()
    models[name] = {"file": path.name, "sha256": hashlib.sha256(path.read_bytes()).hexdigest(),
                    "bytes": path.stat().st_size, "size": ckpt["size"], "dataset": ckpt["data"]["name"],
                    "classes": ckpt["data"]["classes"], "params": sum(p.numel() for p in model.parameters()),
                    "top1": result["top1"], "test_images": result["images"], "epochs": ckpt["epoch"],
                    "gating": {k: getattr(model.cfg, k) for k in ("gate_init", "noise_schedule")},
                    "expert_shares": result["routing"]["clean"], "command": command, "default": default,
                    "torch": torch.__version__}
    pretrained.INDEX.write_text(json.dumps({"format": "mlit-edge-pretrained", "models": models}, indent=1) + "\n")
    return models[name]


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description="Ship a finished training run as a pretrained model.")
    ap.add_argument("run_dir")
    ap.add_argument("name")
    ap.add_argument("--command", required=True, help="the exact command that trained it")
    args = ap.parse_args()
    print(json.dumps(add(args.run_dir, args.name, args.command), indent=1))
