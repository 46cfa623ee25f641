"""PyTorch behind the `Runner` contract: a module (the reference, or its `to_deploy` form), and a
checkpoint opened as an artifact (`open_checkpoint`, the opener bench hands to `runtime.artifact.open_artifact`)."""
from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Callable, Mapping

import numpy as np

from ..artifacts.schema import ArtifactRecord
from ..runtime.artifact import INPUT, RunnerOptions
from ..runtime.runners import Runner
from .source import model_record


class TorchRunner(Runner):
    """A torch module on CPU or CUDA whose outputs are named `output_names` (routing outputs are the
    ones after "logits"). `input_shape` is (None, C, S, S): the batch is free."""

    name = "torch"

    def __init__(self, module, output_names: list[str], input_shape: tuple[int | None, ...], device: str = "cpu",
                 threads: int | None = None) -> None:
        super().__init__()
        self.module, self.device, self.threads = module, device, threads
        self.output_names, self.input_shape = list(output_names), tuple(input_shape)

    def activate_impl(self) -> None:
        import torch

        if self.threads:
            torch.set_num_threads(self.threads)
        self.module = self.module.to(self.device).eval()
        self.input_names = [INPUT]
        self.route_names = [n for n in self.output_names if n != "logits"]
        self.settings = {"device": self.device, "threads": torch.get_num_threads()}

    def infer_impl(self, feed: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        import torch

        x = torch.from_numpy(np.ascontiguousarray(feed[INPUT])).to(self.device)
        with torch.inference_mode():
            out = self.module(x)
        outs = out if isinstance(out, (tuple, list)) else (out,)
        return {n: o.detach().cpu().numpy() for n, o in zip(self.output_names, outs)}


class CheckpointRunner(TorchRunner):
    """A classifier checkpoint: logits from the eval-mode model itself and, with `routing`, each layer's
    clean expert choices from the same forward pass (the choices the deployed graph makes)."""

    def __init__(self, ckpt: dict, routing: bool, device: str = "cpu", threads: int | None = None) -> None:
        cfg = ckpt["config"]
        names = ["logits"] + ([f"experts_{i}" for i in range(cfg["depth"])] if routing else [])
        super().__init__(None, names, (None, cfg["in_chans"], cfg["img_size"], cfg["img_size"]), device, threads)
        self.ckpt = ckpt

    def activate_impl(self) -> None:
        from ..train.checkpoint import model_from_checkpoint

        self.module = model_from_checkpoint(self.ckpt)
        super().activate_impl()

    def infer_impl(self, feed: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        import torch

        x = torch.from_numpy(np.ascontiguousarray(feed[INPUT])).to(self.device)
        with torch.inference_mode():
            if not self.route_names:
                return {"logits": self.module(x).detach().cpu().numpy()}
            logits, aux = self.module(x, return_aux=True)
        routes = [r.clean_i.reshape(len(x), -1, r.clean_i.shape[-1]) for r in aux.routings]  # (B, N, K)
        return {n: o.detach().cpu().numpy() for n, o in zip(self.output_names, [logits, *routes])}


def checkpoint_opener(path: Path, content: bytes) -> tuple[Callable[[RunnerOptions], Runner], ArtifactRecord]:
    """A supervised mLiT checkpoint, loaded once: a maker of its runners (one per set of options, all
    from this one load) and a record like an export's sidecar."""
    from ..train.checkpoint import config_from_dict, load_checkpoint
    ckpt = load_checkpoint(path, kind="mlit", content=content)
    cfg = config_from_dict("mlit", ckpt["config"])
    params = sum(int(np.prod(t.shape)) for t in ckpt["model"].values())
    info = model_record(cfg, ckpt.get("size"), ckpt["data"], str(path), hashlib.sha256(content).hexdigest(), params)
    record = ArtifactRecord.from_json({**info, "precision": "fp32"})
    return (lambda options: CheckpointRunner(ckpt, options.routing, options.device, options.threads)), record


def open_checkpoint(path: Path, content: bytes, options: RunnerOptions) -> tuple[Runner, ArtifactRecord]:
    """A checkpoint as an artifact (`runtime.artifact.open_artifact`'s opener for the torch format)."""
    make, record = checkpoint_opener(path, content)
    return make(options), record
