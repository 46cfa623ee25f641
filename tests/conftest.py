import pytest
import torch

from mlit_edge.config import MLiTConfig


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


@pytest.fixture
def tiny_cfg() -> MLiTConfig:
    """A 3-layer mLiT on 12x12 images: every code path of the real sizes, at a fraction of the cost."""
    return MLiTConfig(img_size=12, patch_size=3, num_classes=5, dim=24, depth=3, heads=4, groups=2,
                      hidden_first=16, hidden_last=8, expert_stages=(3, 4, 5))
