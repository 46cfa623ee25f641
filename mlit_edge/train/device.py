"""Where training runs and in what precision: the device, and the autocast dtype for it."""
from __future__ import annotations

import torch


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    device = torch.device(name)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("--device cuda asked for, but no CUDA GPU is available on this machine")
    return device


def cpu_has_amx() -> bool:
    """Whether this CPU has AMX tiles (Intel Sapphire Rapids and later), where bf16 matmuls run at
    several times the fp32 rate; without them bf16 on a CPU gains little or loses."""
    probe = getattr(torch.cpu, "_is_amx_tile_supported", None)
    return bool(probe and probe())


def amp_dtype(amp: str, device: torch.device) -> torch.dtype | None:
    """[paper] fp16 mixed precision on CUDA. [ours] On a CPU, `auto` is bf16 where the CPU has AMX (the
    training step measured 1.10x faster eagerly and 1.26x under torch.compile than in fp32,
    benchmarks/train_throughput.py) and fp32 elsewhere."""
    if amp == "auto":
        if device.type == "cuda":
            return torch.float16
        return torch.bfloat16 if device.type == "cpu" and cpu_has_amx() else None
    if amp == "fp16" and device.type != "cuda":
        raise ValueError("--amp fp16 needs a CUDA GPU; on CPU use --amp bf16 or --amp off")
    return {"fp16": torch.float16, "bf16": torch.bfloat16, "off": None}[amp]
