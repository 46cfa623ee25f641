"""Percentile activation ranges for the INT8 graphs, in one pass of uniform histograms.

ONNX Runtime's Percentile calibration histograms |x| of every calibrated tensor, batch by batch; after the first
batch it passes `np.histogram` the bin edges as an array, which sorts each batch's values: 18 s of the XXS int8-ort
build's 42 s went there (`cProfile`). The ranges here follow the same rule, with the bins counted by `np.bincount`:
|x| in bins of the first batch's width (its max / `BINS`) from 0, more bins of that width when a later batch
reaches past them; the threshold t is the left edge of the bin where the cumulative share reaches `PERCENTILE`
(ONNX Runtime's choice), and the range is (max(-t, min x), min(t, max x)). The quantizer then takes these ranges
as overrides over a MinMax calibration (`overrides`), so everything else about the graph is as before.
"""
from __future__ import annotations

from typing import Iterable

import numpy as np

from ..base.progress import progress
from .channel_trace import intermediates
from .int8_recipe import constant_names

PERCENTILE = 99.999  # ONNX Runtime's default for CalibrationMethod.Percentile
BINS = 2048  # ONNX Runtime's default number of histogram bins


class _Histogram:
    """One tensor's |x| histogram, from 0 in bins of a fixed width, and its min and max."""

    def __init__(self, width: float) -> None:
        self.width = width
        self.counts = np.zeros(BINS, dtype=np.int64)
        self.low, self.high = np.inf, -np.inf

    def add(self, x: np.ndarray) -> None:
        x = x.reshape(-1)
        self.low, self.high = min(self.low, float(x.min())), max(self.high, float(x.max()))
        index = (np.abs(x) / self.width).astype(np.int64)
        need = int(index.max()) + 1
        if need > len(self.counts):  # a later batch past the last bin: more bins of the same width
            self.counts = np.concatenate([self.counts, np.zeros(need - len(self.counts), dtype=np.int64)])
        self.counts += np.bincount(index, minlength=len(self.counts))

    def range(self, percentile: float) -> tuple[float, float]:
        cdf = np.cumsum(self.counts) / self.counts.sum()
        t = float(np.searchsorted(cdf, percentile / 100.0)) * self.width
        return max(-t, self.low), min(t, self.high)


def quantized_inputs(model, op_types: Iterable[str], exclude: set[str]) -> list[str]:
    """The activations the quantizer will quantize: every non-constant input of the nodes of `op_types` that are
    not in `exclude`, in graph order."""
    constants = constant_names(model)
    types = set(op_types)
    names = [i for n in model.graph.node if n.op_type in types and n.name not in exclude
             for i in n.input if i and i not in constants]
    return list(dict.fromkeys(names))


def percentile_ranges(model, names: list[str], batches: list[np.ndarray], step=None,
                      percentile: float = PERCENTILE) -> dict[str, tuple[float, float]]:
    """Each tensor of `names`, computed by `model` (float) on `batches` (fed to its first input), reduced to its
    percentile range. `step`: a progress step advanced by each batch's images."""
    hists: dict[str, _Histogram] = {}
    for batch, outputs in zip(batches, intermediates(model, names, batches)):
        for name, x in zip(names, outputs):
            if name not in hists:
                hists[name] = _Histogram(max(float(np.abs(x).max()), np.finfo(np.float32).tiny) / BINS)
            hists[name].add(x)
        if step is not None:
            step.advance(len(batch))
    return {n: h.range(percentile) for n, h in hists.items()}


def overrides(ranges: dict[str, tuple[float, float]]) -> dict:
    """ONNX Runtime's `TensorQuantOverrides` that set each tensor's range to `ranges`' (over its calibration)."""
    return {n: [{"rmin": np.float32(lo), "rmax": np.float32(hi)}] for n, (lo, hi) in ranges.items()}


def calibration(model, method: str, op_types: Iterable[str], exclude: set[str], batches: list) -> tuple[str, dict]:
    """What ONNX Runtime's quantizer is given for a recipe's `method`: its own calibration method, and for
    Percentile this module's ranges as overrides over MinMax (the extra options to merge)."""
    if method != "Percentile":
        return method, {}
    names = quantized_inputs(model, op_types, exclude)
    with progress("percentile ranges", sum(map(len, batches))) as shown:
        found = percentile_ranges(model, names, batches, shown)
    return "MinMax", {"TensorQuantOverrides": overrides(found)}
