"""Backends behind one interface: `with Runner(...) as r: outputs = r.infer({"images": x})`.

Parity and bench code only ever see `Runner`. Inputs and outputs are numpy arrays keyed by name, so
a runner needs no torch unless it is the torch one. Heavy backends are imported when a runner opens.
"""
from __future__ import annotations

from pathlib import Path
from typing import Mapping

import numpy as np


class Runner:
    """Base class: open on `__enter__`, release on `__exit__`, run with `infer`."""

    name = "runner"

    def __enter__(self) -> "Runner":
        self.open()
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def open(self) -> None:  # noqa: D401 - backends override
        """Load the model."""

    def close(self) -> None:
        """Release the model."""

    @property
    def output_names(self) -> list[str]:
        raise NotImplementedError

    def infer(self, feed: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        raise NotImplementedError


class TorchRunner(Runner):
    """A torch module (the reference, or its `to_deploy` form) on CPU or CUDA."""

    name = "torch"

    def __init__(self, module, output_names: list[str], device: str = "cpu", threads: int | None = None) -> None:
        self.module, self._outputs, self.device, self.threads = module, output_names, device, threads

    def open(self) -> None:
        import torch

        if self.threads:
            torch.set_num_threads(self.threads)
        self.module = self.module.to(self.device).eval()

    @property
    def output_names(self) -> list[str]:
        return self._outputs

    def infer(self, feed: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        import torch

        (x,) = feed.values()
        with torch.inference_mode():
            out = self.module(torch.from_numpy(np.ascontiguousarray(x)).to(self.device))
        outs = out if isinstance(out, (tuple, list)) else (out,)
        return {n: o.detach().cpu().numpy() for n, o in zip(self._outputs, outs)}


class OnnxRuntimeRunner(Runner):
    """An ONNX file through ONNX Runtime (CPU by default; CUDA/TensorRT providers where installed)."""

    name = "onnxruntime"

    def __init__(self, path: str | Path, threads: int | None = None, providers: list[str] | None = None) -> None:
        self.path, self.threads, self.providers = Path(path), threads, providers
        self.session = None

    def open(self) -> None:
        import onnxruntime as ort

        opts = ort.SessionOptions()
        if self.threads:
            opts.intra_op_num_threads = self.threads
        opts.log_severity_level = 3
        available = ort.get_available_providers()
        providers = [p for p in (self.providers or ["CPUExecutionProvider"]) if p in available]
        if not providers:
            raise RuntimeError(f"none of the providers {self.providers} is available (have {available})")
        try:
            self.session = ort.InferenceSession(str(self.path), opts, providers=providers)
        except Exception as e:  # ORT raises its own exception types for bad files
            raise ValueError(f"ONNX Runtime cannot load {self.path}: {str(e).splitlines()[0][:300]}") from None

    def close(self) -> None:
        self.session = None

    @property
    def input_name(self) -> str:
        return self.session.get_inputs()[0].name

    @property
    def output_names(self) -> list[str]:
        return [o.name for o in self.session.get_outputs()]

    def infer(self, feed: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        names = self.output_names
        return dict(zip(names, self.session.run(names, dict(feed))))
