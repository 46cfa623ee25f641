"""`mlit-edge bench` as a Python call (`mlit_edge.bench([...])`): the CLI's `bench_and_save` with the CLI's
defaults, returning a `Report` whose `print` is the CLI's table."""
from __future__ import annotations

import os
from dataclasses import fields
from typing import Any, Iterable, List, Optional, Union

from ..base.messages import escaped
from .options import BenchConfig, provider_names
from .report import format_bench
from ..base.values import PathArg, check_value
from .suite import bench_and_save

PathLike = Union[str, "os.PathLike[str]"]


class Report:
    """What `mlit-edge bench` measured: `print(report)` shows the CLI's table, `.rows` its rows and `.data`
    the whole report (what `--json` writes)."""

    def __init__(self, data: dict) -> None:
        self.data = data

    @property
    def rows(self) -> List[dict]:
        return self.data["rows"]

    @property
    def failed(self) -> List[dict]:
        """The artifacts that could not be benched, each with its one-line `error` (the CLI exits 1 on them)."""
        return self.data.get("failed", [])

    def __str__(self) -> str:
        return format_bench(self.data)

    def __repr__(self) -> str:
        failed = f", {len(self.failed)} failed" if self.failed else ""
        return f"mlit_edge.bench.Report({len(self.rows)} rows{failed})"


@escaped
def bench(artifacts: Iterable[Any], json: Optional[PathLike] = None, plot: Optional[PathLike] = None,
          **kw: Any) -> Report:
    """Bench `artifacts`: paths, `pretrained:NAME`, or anything `os.PathLike` (the API's artifacts and models:
    a model's path is its checkpoint). Keywords are `BenchConfig`'s, with its defaults, which are the CLI's (each
    artifact in its own process, ONNX Runtime on the CPU); `providers` may be the CLI's "cpu,cuda"; `json` and
    `plot` are the CLI's --json and --plot."""
    valid = sorted(f.name for f in fields(BenchConfig))
    unknown = sorted(set(kw) - set(valid))
    if unknown:
        raise TypeError(f"bench: unknown keyword {', '.join(unknown)}; valid: {', '.join(valid + ['json', 'plot'])}")
    providers = kw.get("providers")  # not given: BenchConfig's default, which the CLI's is too
    if isinstance(providers, str):
        kw["providers"] = provider_names(providers)
    elif isinstance(providers, list):
        kw["providers"] = tuple(providers)
    if kw.get("iterations") is not None:
        kw["duration_s"] = None  # exactly N calls, as the CLI's --iterations
    cfg = BenchConfig(**kw)  # every value checked, in the CLI's words, before anything is opened
    json = check_value(PathArg(optional=True), json, "--json")
    plot = check_value(PathArg(optional=True), plot, "--plot")
    single = isinstance(artifacts, (str, os.PathLike))
    if not single and (isinstance(artifacts, bytes) or not isinstance(artifacts, Iterable)):
        raise TypeError(f"bench: artifacts {artifacts!r}: expected a path or a list of paths")
    paths = [check_value(PathArg(), a, "ARTIFACTS") for a in ([artifacts] if single else artifacts)]
    if not paths:
        raise ValueError("ARTIFACTS: give at least one artifact to bench")
    return Report(bench_and_save(paths, cfg, json, plot))
