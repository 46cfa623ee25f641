"""Ship a finished run as a pretrained model of the package (maintainers only).

Writes the run's weights as `mlit_edge/weights/NAME/model.safetensors` and its config, data and provenance (the
run's checkpoint and its sha256; no optimizer state) as `NAME/config.json`, with the writer `mlit-edge
export-weights` uses (`mlit_edge.train.weights_file`), and records both files' sha256, the metrics and the
exact command that made it in `mlit_edge/weights/index.json`. A training run
(an mLiT classifier) is evaluated as `mlit-edge eval` does; a pre-training run (an mmLiT masked
auto-encoder) records its final losses and is shipped whole, encoder and decoder:

    python tools/publish_pretrained.py runs/xxs-mnist5k xxs-mnist5k --command "mlit-edge train ..."
    python tools/publish_pretrained.py runs/pretrain-xxs-mnist5k xxs-mnist5k-mae --command "mlit-edge pretrain ..."

`--refresh NAME...` rewrites a shipped model's config.json and README.md as this version writes them (timm's keys,
the model card), its weights untouched: `python tools/publish_pretrained.py --refresh xxs-mnist5k xxs-mnist5k-mae`.
"""
from __future__ import annotations

import argparse
import hashlib
import json
from pathlib import Path

import torch

from mlit_edge.artifacts.sidecar import atomic_path
from mlit_edge.train import pretrained
from mlit_edge.train.checkpoint import load_checkpoint, model_from_checkpoint, read_checkpoint
from mlit_edge.train.eval_checkpoint import evaluate_checkpoint
from mlit_edge.train.hub_config import TIMM_KEYS, timm_keys
from mlit_edge.train.model_card import CARD_FILE, model_card
from mlit_edge.train.weights_file import CONFIG_FILE, WEIGHTS_FILE, write_weights


def ship(ckpt: dict, name: str, provenance: dict, entry: dict) -> dict:
    """Write `ckpt`'s weights pair as pretrained NAME and record it in the index with `entry`'s metadata."""
    folder = pretrained.WEIGHTS / name
    config = write_weights(ckpt, folder, provenance, entry.get("command"))
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


def refresh(name: str) -> dict:
    """Bring shipped NAME's config.json to what `write_weights` writes now (timm's keys beside mlit-edge's own,
    `hub_config`) and write its model card, README.md; the weights' bytes and every recorded field stay as they
    are, and the index records the config's new sha256. Returns the index entry."""
    load_checkpoint(pretrained.PREFIX + name)  # both files checked against the index before anything changes
    folder = pretrained.WEIGHTS / name
    config = json.loads((folder / CONFIG_FILE).read_text())
    config = {**timm_keys(config), **{k: v for k, v in config.items() if k not in TIMM_KEYS}}
    entry = pretrained.entry_of(name)
    for file, text in ((CONFIG_FILE, json.dumps(config, indent=1) + "\n"),
                       (CARD_FILE, model_card(config, entry["command"]))):
        with atomic_path(folder / file) as tmp:
            tmp.write_text(text, encoding="utf-8")
    models = pretrained.index()
    models[name]["config_sha256"] = hashlib.sha256((folder / CONFIG_FILE).read_bytes()).hexdigest()
    pretrained.INDEX.write_text(json.dumps({"format": "mlit-edge-pretrained", "models": models}, indent=1) + "\n")
    load_checkpoint(pretrained.PREFIX + name)  # and read back as every user reads it
    return models[name]


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description="Ship a finished training or pre-training run as a pretrained model, "
                                             "or --refresh the config.json and model card of shipped ones.")
    ap.add_argument("run_dir", nargs="?")
    ap.add_argument("name", nargs="?")
    ap.add_argument("--command", help="the exact command that made the run")
    ap.add_argument("--wall-time", default=None, help="how long that command took, and where")
    ap.add_argument("--refresh", nargs="+", metavar="NAME", help="shipped models whose config.json and README.md to "
                                                                  "rewrite as this version writes them")
    args = ap.parse_args()
    if args.refresh:
        print(json.dumps({name: refresh(name) for name in args.refresh}, indent=1))
    elif not (args.run_dir and args.name and args.command):
        ap.error("give RUN_DIR NAME --command, or --refresh NAME...")
    else:
        print(json.dumps(add(args.run_dir, args.name, args.command, args.wall_time), indent=1))
