"""Run by test_fit.py under torchrun: one DDP step on a tiny mLiT, rank 0 saves the gradients."""
import sys

import torch
from torch.nn.parallel import DistributedDataParallel as DDP

from mlit_edge.train.data import Loader
from mlit_edge.train.distributed import Dist, init_distributed, shutdown
from tests.helpers import synthetic_set, tiny_step_model


def step(d: Dist, out: str) -> None:
    """One step; the DDP wrapper dies with this frame, before the process group is destroyed."""
    model = DDP(tiny_step_model())
    loader = Loader(synthetic_set(), 4, train=True, seed=0, rank=d.rank, world=d.world, augment=False)
    loader.set_epoch(0)
    x, y = next(iter(loader))
    torch.nn.functional.cross_entropy(model(x), y).backward()
    if d.main:
        torch.save({n: p.grad for n, p in model.module.named_parameters()}, out)


if __name__ == "__main__":
    dist = init_distributed(torch.device("cpu"))
    step(dist, sys.argv[1])
    shutdown(dist)
