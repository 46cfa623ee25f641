"""Ship a finished run as a pretrained model of the package (maintainers only).

Writes the run's weights, config and data (no optimizer state) to `mlit_edge/weights/NAME.pt` and records
its sha256, metrics and the exact command that made it in `mlit_edge/weights/index.json`. A training run
(an mLiT classifier) is evaluated as `mlit-edge eval` does; a pre-training run (an mmLiT masked
auto-encoder) records its final losses and is shipped whole, encoder and decoder:

    python tools/publish_pretrained.py runs/xxs-mnist5k xxs-mnist5k --command "mlit-edge train ..."
    python tools/publish_pretrained.py runs/pretrain-xxs-mnist5k xxs-mnist5k-mae --command "mlit-edge pretrain ..."
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


def add(run_dir: str | Path, name: str, command: str, wall_time: str | None = None,
        default: bool = True) -> dict:
    """Ship the checkpoint of a finished run as pretrained NAME: weights, config and data only."""
    run_dir = Path(run_dir)
    ckpt = load_checkpoint(run_dir / "checkpoint.pt")
    kind, model = ckpt["kind"], model_from_checkpoint(ckpt)
    kept = ("epoch", "test", "routing") if kind == "mlit" else ("epoch", "train")
    lean = make_checkpoint(kind, model, model.cfg, ckpt["size"], ckpt["data"], epoch=ckpt["epoch"],
                           metrics={k: ckpt["metrics"][k] for k in kept})
    pretrained.WEIGHTS.mkdir(exist_ok=True)
    path = pretrained.WEIGHTS / f"{name}.pt"
    save_atomic(lean, path)
    entry = {"file": path.name, "sha256": hashlib.sha256(path.read_bytes()).hexdigest(),
             "bytes": path.stat().st_size, "kind": kind, "size": ckpt["size"], "dataset": ckpt["data"]["name"],
             "classes": ckpt["data"]["classes"], "params": sum(p.numel() for p in model.parameters()),
             "epochs": ckpt["epoch"]}
    if kind == "mlit":
        result = evaluate_checkpoint(str(path))
        entry.update(top1=result["top1"], test_images=result["images"],
                     gating={k: getattr(model.cfg, k) for k in ("gate_init", "noise_schedule")},
                     expert_shares=result["routing"]["clean"], default=default)
    else:  # a masked auto-encoder has no accuracy of its own; what it learnt shows once it is fine-tuned
        train = ckpt["metrics"]["train"]
        entry.update(train_images=ckpt["data"]["size"], mask_ratio=model.cfg.mask_ratio,
                     final_loss=round(train["loss"], 5), encoder_params=sum(p.numel() for p in
                                                                          model.encoder.parameters()),
                     default=False)
    entry.update(command=command, torch=torch.__version__, **({"train_wall_time": wall_time} if wall_time else {}))
    models = pretrained.index()
    models[name] = entry
    pretrained.INDEX.write_text(json.dumps({"format": "mlit-edge-pretrained", "models": models}, indent=1) + "\n")
    return entry


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description="Ship a finished training or pre-training run as a pretrained model.")
    ap.add_argument("run_dir")
    ap.add_argument("name")
    ap.add_argument("--command", required=True, help="the exact command that made the run")
    ap.add_argument("--wall-time", default=None, help="how long that command took, and where")
    args = ap.parse_args()
    print(json.dumps(add(args.run_dir, args.name, args.command, args.wall_time), indent=1))
