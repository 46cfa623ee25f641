"""Ship a finished run as a pretrained model of the package (maintainers only).

Writes the run's weights as `mlit_edge/weights/NAME/model.safetensors` and its config, data and provenance (the
run's checkpoint and its sha256; no optimizer state) as `NAME/config.json`, with the writer `mlit-edge
export-weights` uses (`mlit_edge.train.weights_file`), and records both files' sha256, the metrics and the
exact command that made it in `mlit_edge/weights/index.json`. A training run
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
from mlit_edge.train.checkpoint import model_from_checkpoint, read_checkpoint
from mlit_edge.train.eval_checkpoint import evaluate_checkpoint
from mlit_edge.train.weights_file import CONFIG_FILE, WEIGHTS_FILE, write_weights


def ship(ckpt: dict, name: str, provenance: dict, entry: dict) -> dict:
    """Write `ckpt`'s weights pair as pretrained NAME and record it in the index with `entry`'s metadata."""
    folder = pretrained.WEIGHTS / name
    config = write_weights(ckpt, folder, provenance)
    entry = {"file": f"{name}/{WEIGHTS_FILE}", "sha256": config["weights"]["sha256"],
             "bytes": config["weights"]["bytes"],
             "config_sha256": hashlib.sha256((folder / CONFIG_FILE).read_bytes()).hexdigest(), **entry}
    models = pretrained.index()
    models[name] = entry
    pretrained.INDEX.write_text(json.dumps({"format": "mlit-edge-pretrained", "models": models}, indent=1) + "\n")
    return entry


def add(run_dir: str | Path, name: str, command: str, wall_time: str | None = None,
        default: bool = True) -> dict:
    """Ship the checkpoint of a finished run as pretrained NAME: weights, config and data only."""
    run_dir = Path(run_dir)
    ckpt, sha = read_checkpoint(run_dir / "checkpoint.pt")
    kind, model = ckpt["kind"], model_from_checkpoint(ckpt)
    kept = ("epoch", "test", "routing") if kind == "mlit" else ("epoch", "train")
    lean = {**ckpt, "metrics": {k: ckpt["metrics"][k] for k in kept}}
    provenance = {"checkpoint": str(run_dir / "checkpoint.pt"), "checkpoint_sha256": sha, "command": command}
    entry = {"kind": kind, "size": ckpt["size"], "dataset": ckpt["data"]["name"],
             "classes": ckpt["data"]["classes"], "params": sum(p.numel() for p in model.parameters()),
             "epochs": ckpt["epoch"]}
    if kind == "mmlit":  # a masked auto-encoder has no accuracy of its own; what it learnt shows once fine-tuned
        train = ckpt["metrics"]["train"]
        entry.update(train_images=ckpt["data"]["size"], mask_ratio=model.cfg.mask_ratio,
                     final_loss=round(train["loss"], 5), encoder_params=sum(p.numel() for p in
                                                                          model.encoder.parameters()),
                     default=False)
    entry.update(command=command, torch=torch.__version__, **({"train_wall_time": wall_time} if wall_time else {}))
    entry = ship(lean, name, provenance, entry)
    if kind == "mlit":  # evaluated as shipped: from the pair just written, as `mlit-edge eval` reads it
        result = evaluate_checkpoint(pretrained.PREFIX + name)
        entry.update(top1=result["top1"], test_images=result["images"],
                     gating={k: getattr(model.cfg, k) for k in ("gate_init", "noise_schedule")},
                     expert_shares=result["routing"]["clean"], default=default)
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
