"""DDP set-up under torchrun: NCCL on CUDA, gloo on CPU; rank 0 logs and writes checkpoints."""
from __future__ import annotations

import gc
import os
from dataclasses import dataclass

import torch
import torch.distributed as dist


@dataclass(frozen=True)
class Dist:
    rank: int = 0
    world: int = 1
    local_rank: int = 0

    @property
    def main(self) -> bool:
        return self.rank == 0

    @property
    def enabled(self) -> bool:
        return self.world > 1


def init_distributed(device: torch.device) -> Dist:
    """Join the process group that torchrun describes in the environment; a no-op otherwise."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world <= 1:
        return Dist()
    rank, local = int(os.environ["RANK"]), int(os.environ.get("LOCAL_RANK", "0"))
    if device.type == "cuda":
        torch.cuda.set_device(local)
    if not dist.is_initialized():
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
    return Dist(rank, world, local)


def gather_objects(obj, d: Dist) -> list:
    """Every rank's `obj`, in rank order (a one-item list without DDP)."""
    if not d.enabled:
        return [obj]
    out = [None] * d.world
    dist.all_gather_object(out, obj)
    return out


def barrier(d: Dist) -> None:
    if d.enabled:
        dist.barrier()


def shutdown(d: Dist) -> None:
    """Leave the process group once every rank is done.

    Release every DDP wrapper first. DDP sits in reference cycles, so the collector runs here: a
    reducer that outlives its gloo process group makes the process abort at exit ("terminate
    called without an active exception"), seen with torch 2.14.
    """
    if d.enabled and dist.is_initialized():
        gc.collect()
        dist.barrier()
        dist.destroy_process_group()
