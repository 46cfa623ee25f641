"""What `mlit-edge bench` is asked to measure (`BenchConfig`) and the reference it compares with."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from ..runtime.artifact import BATCH_PROFILE, RunnerOptions
from ..runtime.runners import Runner

ORT_PROVIDERS = {"cpu": "CPUExecutionProvider", "cuda": "CUDAExecutionProvider",
                 "tensorrt": "TensorrtExecutionProvider"}


def provider_names(csv: str) -> tuple[str, ...]:
    """`--ort-providers cpu,cuda` as ONNX Runtime's provider names."""
    names = [p.strip().lower() for p in csv.split(",") if p.strip()]
    unknown = [p for p in names if p not in ORT_PROVIDERS]
    if unknown or not names:
        raise ValueError(f"--ort-providers: unknown {unknown}; choose from {', '.join(ORT_PROVIDERS)}")
    return tuple(ORT_PROVIDERS[p] for p in names)


@dataclass(frozen=True)
class BenchConfig:
    """What `mlit-edge bench` was asked to measure; see the CLI's --help for each field."""

    batches: tuple[int, ...] = BATCH_PROFILE
    warmup_ms: float = 200.0
    warmup_iters: int = 10
    duration_s: float | None = 2.0
    iterations: int | None = None
    threads: int | None = None
    cuda_graph: bool = False
    providers: tuple[str, ...] | None = None
    data: str | None = None
    split: str = "test"
    limit: int | None = None
    data_root: str = "data"
    reference: str | None = None
    isolate: bool = False  # each artifact in its own fresh process (clean memory figures)
    ort_arena: bool = True  # ONNX Runtime's CPU memory arena

    def __post_init__(self) -> None:
        if not self.batches or min(self.batches) < 1:
            raise ValueError(f"batch sizes must be at least 1, got {list(self.batches)}")
        if self.iterations is None and (self.duration_s is None or self.duration_s <= 0):
            raise ValueError("give a positive duration or a number of iterations")
        unknown = set(self.providers or ()) - set(ORT_PROVIDERS.values())
        if unknown:
            raise ValueError(f"unknown ONNX Runtime providers {sorted(unknown)}")

    def runner_options(self, routing: bool = False) -> RunnerOptions:
        return RunnerOptions(routing=routing, threads=self.threads, providers=self.providers, ort_arena=self.ort_arena,
                             cuda_graph=self.cuda_graph, require_sidecar=False)


@dataclass
class Reference:
    """The PyTorch reference's outputs on the evaluation images, computed once per bench."""

    path: str
    record: dict
    logits: np.ndarray | None = None
    routes: list[np.ndarray] | None = None
    # runners from the one load of the reference (in this process); None in an isolated child, which opens its own
    make_runner: Callable[[RunnerOptions], Runner] | None = None
