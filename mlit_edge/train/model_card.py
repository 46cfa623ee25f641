"""The model card beside a weights pair (`README.md`, as on the Hugging Face hub): YAML front matter (license,
library, tags, datasets, and the metrics of the run that made the weights, as a `model-index`) and a short text.

The metrics are the checkpoint's own record (`metrics`: the last evaluation of `mlit-edge train`, or the final
loss of `pretrain`); a checkpoint that records none gets a card that says so and claims nothing.

Every value of the front matter is written as JSON (`key: <json>`, one line each): JSON's scalars and its flow
collections are YAML too, so any YAML reader takes it, and no class name or path can break out of its quotes.
"""
from __future__ import annotations

import json
import math
import re

from ..base.messages import printable
from .hub_config import CROP_MODE, INTERPOLATION, LICENSE, architecture

CARD_FILE = "README.md"
TAGS = ["mlit-edge", "vision-transformer", "mixture-of-experts", "safetensors"]
# a dataset id the hub can link (cifar10, svhn); an ImageFolder's path is the exporter's business, not the card's
DATASET_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,95}")


def _number(value: object) -> float | None:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    return value if ok else None


def recorded_metrics(fields: dict) -> list[dict]:
    """The model-index metrics a checkpoint's own `metrics` record: held-out top-1 and loss for a classifier
    (with how many images), the final training loss for an mmLiT; [] where it records none."""
    metrics = fields.get("metrics") if isinstance(fields.get("metrics"), dict) else {}
    if fields["kind"] == "mmlit":
        train = metrics.get("train") if isinstance(metrics.get("train"), dict) else {}
        loss = _number(train.get("loss"))
        return [] if loss is None else [{"type": "loss", "value": loss,
                                         "name": "final training loss (masked-patch reconstruction + MoE balance)"}]
    test = metrics.get("test") if isinstance(metrics.get("test"), dict) else {}
    images = _number(test.get("images"))
    where = f" on {int(images)} held-out images" if images else " on the held-out split"
    found = [("accuracy", _number(test.get("acc")), "top-1"), ("loss", _number(test.get("loss")), "cross-entropy")]
    return [{"type": t, "value": v, "name": f"{name}{where}"} for t, v, name in found if v is not None]


def dataset_id(fields: dict) -> str | None:
    name = fields["data"].get("name")
    name = name.split(":", 1)[0] if isinstance(name, str) else ""  # imagefolder:/home/... -> imagefolder
    return name if DATASET_ID.fullmatch(name) else None


def front_matter(fields: dict) -> dict:
    """The card's metadata, as the hub reads it (huggingface_hub's ModelCardData fields)."""
    mae = fields["kind"] == "mmlit"
    task = "image-feature-extraction" if mae else "image-classification"
    data, metrics = dataset_id(fields), recorded_metrics(fields)
    meta = {"license": LICENSE, "library_name": "mlit-edge", "pipeline_tag": task,
            "tags": [task, *TAGS, *(["masked-autoencoder"] if mae else [])]}
    if data:
        meta["datasets"] = [data]
    if metrics:
        meta["metrics"] = sorted({m["type"] for m in metrics})
        dataset = {"name": data or "custom", "type": data or "custom", "split": "train" if mae else "test"}
        meta["model-index"] = [{"name": architecture(fields), "results": [
            {"task": {"type": task}, "dataset": dataset, "metrics": metrics}]}]
    return meta


def model_card(config: dict, made_by: str | None = None) -> str:
    """The text of `README.md` for a weights pair whose `config.json` is `config` (mlit-edge's fields and timm's);
    `made_by` is the command that trained it, where known."""
    meta = front_matter(config)
    head = "".join(f"{k}: {json.dumps(v)}\n" for k, v in meta.items())
    mae, data = config["kind"] == "mmlit", config["data"]
    cfg = config["config"]["encoder"] if mae else config["config"]
    what = "An mmLiT masked auto-encoder (encoder and decoder; fine-tune its encoder)" if mae else "An mLiT classifier"
    size = cfg["img_size"]
    lines = [f"# {printable(architecture(config))}", "",
             f"{what} with mixture-of-experts feed-forward layers, in the layout `mlit-edge export-weights` writes: "
             "`model.safetensors` (the tensors, no pickle) and `config.json` (mlit-edge's config, data and "
             "provenance, and the keys timm reads: `architecture`, `num_classes`, `num_features`, "
             f"{'' if mae else '`label_names`, '}`pretrained_cfg`).", "", "## Model details", "",
             f"- Input: {cfg['in_chans']}x{size}x{size}; the whole image resized to {size}x{size} ({INTERPOLATION}, "
             f"antialiased, no crop: timm's crop_mode '{CROP_MODE}', crop_pct 1.0), scaled to [0, 1], then "
             f"mean {data['mean']}, std {data['std']}",
             f"- Width {cfg['dim']}, depth {cfg['depth']}, top-{cfg['top_k']} routing",
             f"- Data: {printable(data.get('name'))}" + ("" if mae else f"; classes: "
                                                         f"{printable(', '.join(map(str, data['classes'])))}")]
    weights = config.get("weights") if isinstance(config.get("weights"), dict) else {}
    if weights.get("sha256"):
        lines.append(f"- model.safetensors sha256: {weights['sha256']}")
    provenance = config.get("provenance") if isinstance(config.get("provenance"), dict) else {}
    if provenance.get("checkpoint_sha256"):
        lines.append(f"- Exported from a checkpoint of sha256 {provenance['checkpoint_sha256']}")
    if made_by:
        lines.append(f"- Trained by: `{printable(made_by)}`")
    lines += ["", "## Metrics", ""]
    metrics = meta.get("model-index", [{}])[0].get("results", [{}])[0].get("metrics", [])
    lines += [f"- {m['name']}: {m['value']:.4f}" for m in metrics] or [
        "The checkpoint these weights come from records no evaluation (no `metrics`), so this card claims none. "
        "Measure it with `mlit-edge eval --checkpoint model.safetensors`."]
    use = (["mlit-edge finetune --from model.safetensors --data DATA"] if mae else
           ["mlit-edge eval --checkpoint model.safetensors",
            "mlit-edge export --checkpoint model.safetensors --precision fp16"])
    lines += ["", "## Use", "", "```", *use, "```"]
    return f"---\n{head}---\n" + "\n".join(lines) + "\n"

