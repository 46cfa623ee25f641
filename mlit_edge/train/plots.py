"""PNG plots of a run: loss curves (log-log for pre-training, like the paper's Figure 6) and a heat map
of expert utilisation. Written atomically; matplotlib is imported lazily with the Agg backend."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from ..artifacts.sidecar import atomic_path


def save_figure(fig, path: str | Path) -> Path:
    """Write `fig` as a PNG atomically (a temporary beside `path`, then a rename) and close it."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        with atomic_path(path) as tmp:
            fig.savefig(tmp, dpi=110, bbox_inches="tight", format="png")
    finally:
        pyplot().close(fig)
    return path


def pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_curves(rows: list[dict], path: str | Path, loglog: bool = False, title: str = "") -> None:
    """Training (and test) loss per epoch; accuracy on a second axis when present."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6, 4))
    epochs = [r["epoch"] + 1 for r in rows]
    ax.plot(epochs, [r["train"]["loss"] for r in rows], label="train loss")
    tested = [r for r in rows if r.get("test")]
    if tested:
        ax.plot([r["epoch"] + 1 for r in tested], [r["test"]["loss"] for r in tested], label="test loss")
        ax2 = ax.twinx()
        ax2.plot([r["epoch"] + 1 for r in tested], [r["test"]["acc"] for r in tested], "g--", label="test top-1")
        ax2.set_ylabel("test top-1")
        ax2.legend(loc="center right")
    if loglog:
        ax.set_xscale("log")
        ax.set_yscale("log")
    ax.set_xlabel("epoch")
    ax.set_ylabel("loss")
    ax.set_title(title)
    ax.legend(loc="upper right")
    save_figure(fig, path)


def plot_experts(panels: dict[str, list[list[float]]], path: str | Path) -> None:
    """Heat maps side by side, one per routing (e.g. the training one and the clean, deployed one): one row
    per MoE layer, one column per expert, colour = share of routed token slots."""
    plt = pyplot()
    width = max(len(r) for rows in panels.values() for r in rows)
    depth = max(len(rows) for rows in panels.values())
    fig, axes = plt.subplots(1, len(panels), figsize=(0.6 + (1.2 + 0.8 * width) * len(panels), 1.3 + 0.35 * depth),
                             squeeze=False)
    for ax, (title, rows) in zip(axes[0], panels.items()):
        grid = np.full((depth, width), np.nan)
        for i, r in enumerate(rows):
            grid[i, : len(r)] = r
        im = ax.imshow(grid, cmap="viridis", vmin=0, vmax=1, aspect="auto")
        for (i, j), v in np.ndenumerate(grid):
            if not np.isnan(v):
                ax.text(j, i, f"{v:.2f}", ha="center", va="center", color="w" if v < 0.6 else "k", fontsize=8)
        ax.set_xlabel("expert")
        ax.set_ylabel("MoE layer")
        ax.set_xticks(range(width))
        ax.set_yticks(range(depth))
        ax.set_title(title, fontsize=9)
    fig.colorbar(im, ax=list(axes[0]), label="share of routed token slots")
    save_figure(fig, path)


def plot_reconstruction(model, data, path: str | Path, n: int = 8, seed: int = 0) -> Path:
    """MAE's figure for `n` images of `data` (an ImageSet), the first of each class first: the masked input
    the encoder saw, the reconstruction with the visible patches pasted back, and the original, one column
    per image.

    The mask is drawn from `seed` inside a forked RNG, so the figure is the same at every epoch for the same
    weights and a run's own random stream (and so its resume) is untouched.
    """
    import torch

    from ..model.mae import patchify, unpatchify

    cfg, p, chans = model.cfg, model.cfg.encoder.patch_size, model.cfg.encoder.in_chans
    first_of: dict[int, int] = {}
    for i, c in enumerate(data.labels.tolist()):
        first_of.setdefault(c, i)
    picked = sorted(first_of.values())[:n]
    taken = set(picked)
    picked += [i for i in range(min(len(data), 2 * n)) if i not in taken][: n - len(picked)]
    x = torch.from_numpy(data.inputs(picked))
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad(), torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            out = model(x.to(next(model.parameters()).device))
    finally:
        model.train(was_training)
    pred, mask = out.pred.float().cpu(), out.mask.float().cpu()
    if cfg.norm_pix_loss:  # the decoder predicts each patch normalised by its own mean and variance
        target = patchify(x, p)
        pred = pred * (target.var(-1, keepdim=True) + 1e-6).sqrt() + target.mean(-1, keepdim=True)
    hidden = unpatchify(mask[..., None].expand(-1, -1, p * p * chans), p, chans) > 0.5  # (n, C, S, S)
    mean = torch.tensor(data.mean).view(1, -1, 1, 1)
    std = torch.tensor(data.std).view(1, -1, 1, 1)

    def pixels(t):
        return (t * std + mean).clamp(0, 1).permute(0, 2, 3, 1).numpy()  # (n, S, S, C) in [0, 1]

    rows = {"masked input": pixels(torch.where(hidden, (0.5 - mean) / std, x)),
            "reconstruction + visible": pixels(torch.where(hidden, unpatchify(pred, p, chans), x)),
            "original": pixels(x)}
    plt = pyplot()
    fig, axes = plt.subplots(len(rows), len(x), figsize=(1.1 * len(x), 1.2 * len(rows)), squeeze=False)
    for r, (title, images) in enumerate(rows.items()):
        for c, img in enumerate(images):
            ax = axes[r][c]
            ax.imshow(img.squeeze(-1) if img.shape[-1] == 1 else img, cmap="gray", vmin=0, vmax=1)
            ax.set_xticks([])
            ax.set_yticks([])
        axes[r][0].set_ylabel(title, fontsize=7)
    ratio = cfg.mask_ratio
    fig.suptitle(f"mmLiT reconstruction, {ratio:.0%} of the patches hidden (MSE on them "
                 f"{out.mse_masked.item():.4f})", fontsize=9)
    return save_figure(fig, path)
