"""What `mlit-edge bench` is asked to measure (`BenchConfig`) and the reference it compares with."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from ..artifacts.schema import ArtifactRecord
from ..runtime.artifact import BATCH_PROFILE, RunnerOptions
from ..runtime.runners import Runner
from ..base.values import Flag, Float, Int, Ints, PathArg, Text, arg, max_threads, validate

ORT_PROVIDERS = {"cpu": "CPUExecutionProvider", "cuda": "CUDAExecutionProvider",
                 "tensorrt": "TensorrtExecutionProvider"}


def provider_names(csv: str) -> tuple[str, ...]:
    """`--ort-providers cpu,cuda` as ONNX Runtime's provider names."""
    if not isinstance(csv, str):
        raise TypeError(f"--ort-providers {csv!r}: expected names such as 'cpu,cuda'")
    names = [p.strip().lower() for p in csv.split(",") if p.strip()]
    unknown = [p for p in names if p not in ORT_PROVIDERS]
    if unknown or not names:
        raise ValueError(f"--ort-providers: unknown {unknown}; choose from {', '.join(ORT_PROVIDERS)}")
    return tuple(ORT_PROVIDERS[p] for p in names)


def provider_csv(names: tuple[str, ...]) -> str:
    """ONNX Runtime's provider names as `--ort-providers` writes them (`provider_names` read back)."""
    short = {full: name for name, full in ORT_PROVIDERS.items()}
    return ",".join(short[n] for n in names)


@dataclass(frozen=True)
class BenchConfig:
    """What `mlit-edge bench` was asked to measure; see the CLI's --help for each field."""

    batches: tuple[int, ...] = arg(BATCH_PROFILE, Ints(1), "--batch")
    warmup_ms: float = arg(200.0, Float(0))
    warmup_iters: int = arg(10, Int(0))
    duration_s: float | None = arg(2.0, Float(0.01, optional=True), "--duration")  # None: `iterations` calls
    iterations: int | None = arg(None, Int(1, optional=True))
    # past 8 per core the OpenMP runtime of torch or ONNX Runtime can fail to start them (a SIGSEGV, not an error)
    threads: int | None = arg(None, Int(1, max_threads, optional=True))
    cuda_graph: bool = arg(False, Flag())
    providers: tuple[str, ...] | None = (ORT_PROVIDERS["cpu"],)  # None: ONNX Runtime on the CPU as well
    data: str | None = arg(None, PathArg(optional=True))  # a dataset name or an ImageFolder path
    split: str = arg("test", Text())
    limit: int | None = arg(None, Int(1, optional=True))
    data_root: str = arg("data", PathArg())
    reference: str | None = arg(None, PathArg(optional=True))
    # each artifact in its own fresh process (clean memory figures): the CLI's default and the API's
    isolate: bool = arg(True, Flag())
    ort_arena: bool = arg(True, Flag())  # ONNX Runtime's CPU memory arena

    def __post_init__(self) -> None:
        validate(self)  # types and ranges in the CLI's words (base.values), before anything is opened
        if self.iterations is None and self.duration_s is None:
            raise ValueError("give a positive duration or a number of iterations")
        if isinstance(self.providers, str) or not all(isinstance(p, str) for p in self.providers or ()):
            raise TypeError(f"--ort-providers {self.providers!r}: expected a tuple of ONNX Runtime provider names")
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
    record: ArtifactRecord
    logits: np.ndarray | None = None
    routes: list[np.ndarray] | None = None
    # runners from the one load of the reference (in this process); None in an isolated child, which opens its own
    make_runner: Callable[[RunnerOptions], Runner] | None = None
