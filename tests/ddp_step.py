"""Run by test_fit.py under torchrun: one DDP step on a tiny mLiT, rank 0 saves the gradients."""
import sys

import torch
from torch.nn.parallel import DistributedDataParallel as DDP

from mlit_edge.data import Loader
from mlit_edge.distributed import init_distributed, shutdown
from test_fit import TINY, synthetic_set, tiny_step_model

d = init_distributed(torch.device("cpu"))
model = DDP(tiny_step_model())
loader = Loader(synthetic_set(), 4, train=True, seed=0, rank=d.rank, world=d.world, augment=False)
loader.set_epoch(0)
x, y = next(iter(loader))
torch.nn.functional.cross_entropy(model(x), y).backward()
if d.main:
    torch.save({n: p.grad for n, p in model.module.named_parameters()}, sys.argv[1])
shutdown(d)
assert TINY
