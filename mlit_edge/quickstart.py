"""`mlit-edge quickstart`: the whole chain on the embedded digits, on a CPU, in minutes.

By default it starts from the pretrained mLiT of the size (shipped in the package): build fp32,
fp16 and INT8 artifacts for ONNX Runtime (TensorRT where it imports) -> bench them side by side
against that checkpoint. `train=True` first trains a model from scratch for `epochs` (re-running
continues an unfinished run) and benches the artifacts against that one instead.
"""
from __future__ import annotations

import logging
from pathlib import Path

from .bench.options import BenchConfig
from .bench.suite import bench_and_save
from .engine.build import BuildRequest, run_build
from .export.source import open_source
from .train.pretrained import default_for, describe_spec as describe

logger = logging.getLogger(__name__)


def run_quickstart(out: str | Path = "quickstart", size: str = "xxs", train: bool = False, epochs: int = 10,
                   batch_size: int = 32, lr: float = 1e-3, batches: tuple[int, ...] = (1, 8), duration_s: float = 0.5,
                   progress: bool = True, calib_cache: str | None = None, overrides: dict | None = None) -> dict:
    """Run the chain; returns the bench report (also written to OUT/bench.json, with per-call samples).

    `overrides` are MLiTConfig fields, as `train --set` takes them (with `train` only). Training follows the
    from-scratch recipe of docs/training.md: positions start at the sin-cos table unless `overrides` say otherwise.
    """
    out = Path(out)
    if train:
        ckpt = str(_train(out / "run", size, epochs, batch_size, lr, progress, overrides))
    else:
        if overrides:
            raise ValueError("--set changes the model, so it needs --train (a pretrained model is what it is)")
        ckpt = default_for(size)
        if ckpt is None:
            raise ValueError(f"no pretrained mLiT-{size.upper()} ships with mlit-edge (mlit-edge pretrained lists "
                             "them); use --train to train one first")
        logger.info(f"== 1/3 start from {describe(ckpt)} (--train trains one from scratch instead)")
    requests = [BuildRequest(precision=precision, checkpoint=ckpt, out=str(out / "artifacts"), calib_cache=calib_cache,
                             force=True, progress=progress)
                for precision in ("fp32", "fp16", "int8")]  # quickstart owns its folder
    source = open_source(requests[0])  # one read of the checkpoint for the three builds
    artifacts = []
    for req in requests:
        logger.info(f"== 2/3 build {req.precision}")
        artifacts.append(str(run_build(req, source=source).artifact))
    logger.info("== 3/3 bench the artifacts against the PyTorch checkpoint (each in a fresh process, so memory figures "
                "are each artifact's own)")
    cfg = BenchConfig(batches=tuple(batches), duration_s=duration_s, isolate=True)
    return bench_and_save([*artifacts, ckpt], cfg, json_path=out / "bench.json")


def _train(run_dir: Path, size: str, epochs: int, batch_size: int, lr: float, progress: bool,
           overrides: dict | None) -> Path:
    """Train (or finish training) the quickstart's own model; returns its checkpoint."""
    from .train.checkpoint import load_checkpoint
    from .train.fit import RunConfig, fit

    ckpt = run_dir / "checkpoint.pt"
    if ckpt.is_file() and load_checkpoint(ckpt).get("epoch") == epochs:
        logger.info(f"== 1/3 train: {ckpt} already holds {epochs} epochs, reusing it")
    else:
        logger.info(f"== 1/3 train mLiT-{size.upper()} on the embedded MNIST digits for {epochs} epochs (CPU is fine)")
        fit(RunConfig(task="train", size=size, data="mnist5k", out=str(run_dir), epochs=epochs, batch_size=batch_size,
                      lr=lr, resume=ckpt.is_file(), progress=progress,
                      overrides={"pos_init": "sincos", **(overrides or {})}))
    return ckpt
