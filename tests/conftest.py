from pathlib import Path

import pytest
import torch

from mlit_edge.model.config import MLiTConfig

SMALL = dict(img_size=36, num_classes=10, dim=24, depth=3, heads=4, groups=2, hidden_first=16, hidden_last=8)


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


@pytest.fixture
def tiny_cfg() -> MLiTConfig:
    """A 3-layer mLiT on 12x12 images: every code path of the real sizes, at a fraction of the cost."""
    return MLiTConfig(img_size=12, patch_size=3, num_classes=5, dim=24, depth=3, heads=4, groups=2,
                      hidden_first=16, hidden_last=8, expert_stages=(3, 4, 5))


@pytest.fixture(scope="session")
def trained_checkpoint(tmp_path_factory) -> tuple[torch.nn.Module, Path]:
    """A small mLiT (36x36 input, 3 layers) trained for three epochs on the embedded digits, so its
    predictions and routing mean something, and its checkpoint as `mlit-edge train` writes one."""
    from mlit_edge.model.mlit import MLiT
    from mlit_edge.train.checkpoint import make_checkpoint, save_atomic
    from mlit_edge.train.data import Loader, load_dataset

    torch.manual_seed(0)
    train = load_dataset("mnist5k", "train")
    model = MLiT(MLiTConfig(**SMALL))
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    for epoch in range(3):
        loader = Loader(train, 64, train=True, seed=0, augment=False)
        loader.set_epoch(epoch)
        for x, y in loader:
            logits, aux = model(x, return_aux=True)
            loss = torch.nn.functional.cross_entropy(logits, y) + aux.loss
            opt.zero_grad()
            loss.backward()
            opt.step()
    model.eval()
    path = tmp_path_factory.mktemp("trained") / "checkpoint.pt"
    save_atomic(make_checkpoint("mlit", model, model.cfg, "xxs-custom", train.meta(), epoch=3), path)
    return model, path
