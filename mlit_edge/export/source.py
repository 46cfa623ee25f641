"""What an export starts from, and the record that every artifact made from it carries: the model,
its classes and preprocessing, and where it came from.

A source is a trained checkpoint (or a shipped `pretrained:NAME`), random weights of a size, or an
existing ONNX with its sidecar (the device-side flow, which needs neither torch nor the onnx package).
"""
from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..artifacts.schema import ArtifactRecord, SidecarError, check_classifier_record, read_record, recorded
from .flavours import artifact_stem
from ..model.config import MLiTConfig, get_config
from ..model.budget import check_batch_fits
from .. import __version__
from ..base.messages import require_file
from ..runtime.runners import load_onnx

if TYPE_CHECKING:
    from ..model.mlit import MLiT

logger = logging.getLogger(__name__)


def model_record(cfg: MLiTConfig, size: str | None, data: dict, checkpoint: str | None, sha256: str | None,
                 params: int) -> dict:
    """The provenance fields of a model: config, size, classes, preprocessing and its checkpoint."""
    return {"model": {"kind": "mlit", "size": size, "config": {k: getattr(cfg, k) for k in cfg.__dataclass_fields__},
                      "params": params},
            "classes": data["classes"],
            "preprocess": {"size": data.get("img_size", cfg.img_size), "mean": data["mean"], "std": data["std"],
                           "resize": "antialiased bilinear, then uint8 rounding (mlit_edge.artifacts.preprocess)",
                           "layout": "NCHW float32", "dataset": data.get("name")},
            "checkpoint": checkpoint, "checkpoint_sha256": sha256, "random_weights": checkpoint is None}


def check_publishable(record: ArtifactRecord, cfg: "MLiTConfig | None", where: str) -> None:
    """Refuse, before any work, a record whose sidecar the runtime would refuse once published: the
    runtime's own schema, then (given the model's config) its input size and class count."""
    hint = "the artifact would not load; fix the checkpoint's data fields or retrain"
    try:
        check_classifier_record(record, where, hint)
    except SidecarError as e:
        raise ValueError(str(e)) from None
    if cfg is None or record.preprocess is None or record.classes is None:
        return
    size, classes = record.preprocess.size, record.classes
    if size != cfg.img_size:
        raise ValueError(f"{where}: its data says images are {size} px, but the model takes {cfg.img_size}; {hint}")
    if len(classes) != cfg.num_classes:
        raise ValueError(f"{where}: it names {len(classes)} classes, but the model outputs {cfg.num_classes} "
                         f"logits; {hint}")


def load_for_export(checkpoint: str | None, size: str | None, num_classes: int = 10,
                    random_weights: bool = False) -> tuple[MLiT, dict]:
    """The classifier to export and what its artifacts record about it.

    Without a checkpoint a size builds from its shipped pretrained model (`pretrained:NAME`) where one
    exists for that size and class count; otherwise, or with `random_weights`, the weights are random
    (fine for latency work, meaningless for accuracy).
    """
    from ..model.records import claimed_size
    from ..model.mlit import MLiT, count_parameters
    from ..train.checkpoint import model_from_checkpoint, read_checkpoint
    from ..train.pretrained import default_for

    if not checkpoint and not random_weights and size:
        checkpoint = default_for(size, num_classes)
    if checkpoint:
        ckpt, sha = read_checkpoint(checkpoint, kind="mlit")
        model = model_from_checkpoint(ckpt)
        claimed = claimed_size(ckpt.get("size"), model.cfg)
        if size and ckpt.get("size") is not None and claimed != size:
            raise ValueError(f"{checkpoint} holds an mLiT-{claimed.upper()}, not {size.upper()}; "
                             "drop --size or pass the matching checkpoint")
        info = model_record(model.cfg, claimed, ckpt["data"], str(checkpoint), sha, count_parameters(model))
        check_publishable(ArtifactRecord.from_json(info), model.cfg, f"refused {checkpoint}")
        return model.eval(), info
    if not size:
        raise ValueError("give --checkpoint or --size")
    import torch

    torch.manual_seed(0)
    model = MLiT(get_config(size, num_classes=num_classes))
    data = {"name": None, "classes": [str(i) for i in range(num_classes)], "mean": [0.5] * 3, "std": [0.5] * 3}
    return model.eval(), model_record(model.cfg, size, data, None, None, count_parameters(model))


@dataclass
class Source:
    """What an export starts from: the record its artifacts carry, and the PyTorch classifier (None when
    the source is an existing ONNX) or that ONNX and the precision it already carries."""

    record: ArtifactRecord
    model: Any = None  # MLiT; typed loosely so that an ONNX source needs no torch
    onnx: Path | None = None  # its record then holds the ONNX's sha256, checked when its sidecar was read
    precision: str = "fp32"
    named: bool = False  # the user named it: no banner about a default pretrained model

    @property
    def stem(self) -> str:
        """The name its artifacts start with: mlit-SIZE, or the given ONNX's own stem."""
        return artifact_stem(self.onnx) if self.onnx else f"mlit-{self.record.size}"

    def check_batch(self, batch: int, option: str = "--batch") -> None:
        """Refuse, before anything is allocated, a batch whose buffers would not fit this machine: the
        model's config, or the one its record describes (a device has no torch to build the model)."""
        from ..model.records import record_config

        cfg = self.model.cfg if self.model is not None else record_config(self.record.config)
        check_batch_fits(cfg, batch, option)

    def reusable(self, fp32: Path, opset: int, batch: int | None, probe: bool, attention: str = "grouped",
                 device: str | None = None, pad_to: int | None = None,
                 convention: str = "normalised", input_dtype: str = "float32") -> ArtifactRecord | None:
        """The record of `fp32` when it is already this checkpoint's export, from the same opset, batch,
        attention form, head padding, input convention and dtype, device profile and mlit-edge version (it was checked against
        PyTorch when written); else None."""
        sha = self.record.checkpoint_sha256
        if not sha or not fp32.is_file():
            return None
        try:
            rec = read_record(fp32)
        except (OSError, ValueError):
            return None
        same = (rec.checkpoint_sha256 == sha and rec.opset == opset and rec.batch == (batch or "dynamic")
                and rec.probe is probe and rec.mlit_edge_version == __version__ and rec.attention == attention
                and rec.parity_max_abs_err is not None and rec.profile == device and rec.padded_to == pad_to
                and rec.input_convention == convention and rec.input_dtype == input_dtype)
        return rec if same else None


def open_source(opts, onnx: str | None = None) -> Source:
    """The source `opts` (an `ExportOptions`) names, or the ONNX `onnx`; says which weights it holds when
    the user did not name them (the shipped model a size defaults to, or the random-weights warning)."""
    if onnx:
        source = _onnx_source(Path(onnx))
    else:
        model, info = load_for_export(opts.checkpoint, opts.size or (None if opts.checkpoint else "xxs"),
                                      opts.num_classes, opts.random_weights)
        source = Source(ArtifactRecord.from_json(info), model, named=bool(opts.checkpoint))
    from ..train.pretrained import weights_banner

    banner = weights_banner(source.record, source.named)
    if banner:
        logger.info(banner)
    return source


def _onnx_source(path: Path) -> Source:
    """An existing ONNX: the precision it carries and its record, from its sidecar, else its metadata."""
    require_file(path, "--onnx ")
    try:
        record = recorded(path)  # its sha256 checked: the variants' records cite it
    except FileNotFoundError:
        pass
    else:
        check_publishable(record, None, f"refused {path}")
        return Source(record, onnx=path, precision=record.precision, named=True)
    meta = {p.key: p.value for p in load_onnx(path, load_external_data=False).metadata_props}
    if "mlit_edge" not in meta:
        raise ValueError(f"{path} has neither a sidecar nor mlit-edge metadata: export it with mlit-edge export")
    info = json.loads(meta["mlit_edge"])
    record = ArtifactRecord.from_json({"classes": info.get("classes"), "preprocess": info.get("preprocess"),
                                       "model": info.get("model"), "precision": info.get("precision", "fp32")})
    check_publishable(record, None, f"refused {path}")
    return Source(record, onnx=path, precision=record.precision, named=True)
