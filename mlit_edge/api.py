"""The Python API, one line per step, over the stage functions the CLI calls (no second pipeline):

    import mlit_edge
    m = mlit_edge.load("pretrained:xxs-mnist5k")          # or a checkpoint path
    onnx = m.export(precision="fp16", jetpack="6.2")       # the artifact's path and record
    report = mlit_edge.bench([onnx, m])                     # the same table as the CLI
    with mlit_edge.Classifier.load(onnx) as clf: clf.predict(["a.jpg"])

`load` takes anything a user holds: a checkpoint, a weights folder or `pretrained:NAME` opens as the source
`mlit-edge export --checkpoint` opens (`export.source.open_source`), a `Model`; an artifact (.onnx, .plan,
.xml: any format `runtime.artifact.artifact_format` knows but PyTorch's) opens as the runtime's `Classifier`. Both
`predict(source=...)` the same way (`runtime.inputs`), `Model` with the PyTorch module on the CPU. `Model.export`
and `Model.build` make the request the CLI makes (`ExportRequest`, `BuildRequest`: the same defaults, the same
validation and messages) and call `run_export` / `run_build` with that source; `bench` (`bench.call`, so that
the `mlit_edge.bench` package is the callable) calls the CLI's `bench_and_save` with the CLI's defaults. The artifacts they return are `os.PathLike`, so `bench`, the
runtime's `Classifier.load` and anything that takes a path take them.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, Iterator

from .bench.call import Report, bench  # the API's bench is the bench stage's own call
from .base.messages import escaped, printable
from .artifacts.targets import FORMATS
from .runtime.artifact import artifact_format
from .runtime.classifier import Classifier
from .runtime.prediction import Prediction
from .train.pretrained import is_pretrained
from .artifacts.schema import ArtifactRecord, read_record
from .export.pipeline import run_export
from .export.requests import BuildRequest, ExportOptions, ExportRequest
from .engine.build import run_build
from .export.calibration import default_cache_dir
from .export.source import open_source
from .export.torch_runner import TorchRunner
from .base.values import PathArg, check_value

__all__ = ["Artifact", "Model", "Prediction", "Report", "bench", "load"]
WEIGHTS = "model.safetensors"  # what a weights folder (mlit-edge export-weights) holds, beside its config.json
SOURCE_FIELDS = ("checkpoint", "size", "num_classes", "random_weights")  # fixed by `load`, not by `export`


@dataclass(frozen=True)
class Artifact(os.PathLike):
    """A built artifact (an .onnx or .plan): its path and its sidecar's typed record."""

    path: Path
    record: ArtifactRecord

    @classmethod
    def read(cls, path: str | Path) -> "Artifact":
        return cls(Path(path), read_record(Path(path)))

    def __fspath__(self) -> str:
        return str(self.path)

    def __str__(self) -> str:
        return str(self.path)


def _request(cls, where: str, spec: str, kw: dict[str, Any]):
    """`cls` (a request dataclass) from keywords, as the CLI makes it: unknown ones refused in one line,
    JetPack and TensorRT releases taken as numbers too, the request's own validation."""
    valid = sorted(f.name for f in fields(cls) if f.name not in SOURCE_FIELDS)
    unknown = sorted(set(kw) - set(valid))
    if unknown:
        raise TypeError(f"{where}: unknown keyword {', '.join(unknown)}; valid: {', '.join(valid)}")
    for name in ("jetpack", "tensorrt", "pad_heads"):
        if isinstance(kw.get(name), (int, float)) and not isinstance(kw[name], bool):
            kw[name] = str(kw[name])  # jetpack=6.2 is "6.2", pad_heads=24 is "24"; nan is refused as 'nan'
    return cls(checkpoint=spec, **kw)  # every value checked by the request, in the CLI's words, before any work


class Model:
    """A trained checkpoint or a shipped `pretrained:NAME`, opened once as the export stage's source."""

    def __init__(self, spec: str, source: Any) -> None:
        self.spec = spec
        self.source = source  # export.source.Source: the model and the record its artifacts carry
        self._classifier: Classifier | None = None  # the module behind the runtime's Classifier, made on first use

    @property
    def record(self) -> ArtifactRecord:
        return self.source.record

    @property
    def module(self) -> Any:
        """The PyTorch classifier (eval mode)."""
        return self.source.model

    @escaped
    def export(self, **kw: Any) -> Artifact | list[Artifact]:
        """`mlit-edge export`: the fp32 ONNX, checked against PyTorch, and the variant asked for beside it
        (`precision="fp16"` returns that artifact; `precisions=("fp16", "int8")` a list, one per precision).
        Keywords are `ExportRequest`'s (`out`, `jetpack`, `opset`, `batch`, `calib_data`, ...)."""
        single = "precision" in kw
        if single:
            if "precisions" in kw:
                raise TypeError("export: give precision= or precisions=, not both")
            if not isinstance(kw["precision"], str):
                raise TypeError(f"export: precision={kw['precision']!r} is not a str; e.g. precision='fp16'")
            if "," in kw["precision"]:
                raise ValueError(f"export: precision={kw['precision']!r} is one precision; give precisions=(...) "
                                 "for several")
            kw["precisions"] = (kw.pop("precision"),)
        elif isinstance(kw.get("precisions"), str):
            kw["precisions"] = tuple(p.strip() for p in kw["precisions"].split(",") if p.strip())
        req = _request(ExportRequest, "export", self.spec, kw)
        made = {a.record.precision: a for a in map(Artifact.read, run_export(req, self.source))}
        asked = [made[p] for p in req.precisions]  # the plan makes the fp32 ONNX too; return what was asked for
        return asked[0] if single else asked

    @escaped
    def build(self, **kw: Any) -> Artifact:
        """`mlit-edge build`: the export, then the engine (a TensorRT .plan, or the ONNX for ONNX Runtime where
        TensorRT is absent). Keywords are `BuildRequest`'s (`precision`, `target`, `out`, `jetpack`, ...)."""
        kw.setdefault("calib_cache", str(default_cache_dir()))  # the CLI's default (--no-calib-cache: None)
        return Artifact.read(run_build(_request(BuildRequest, "build", self.spec, kw), self.source).artifact)

    def predict(self, source: Any = None, top_k: int = 1, *, stream: bool = False,
                batch: int | None = None) -> list[Prediction] | Iterator[Prediction]:
        """`Classifier.predict` (the same sources, chunks, `Prediction`s and errors) with the PyTorch module on the
        CPU, fed the preprocessing the model's record states (its size, mean and std), as an artifact of it is."""
        if self._classifier is None:
            size = self.record.preprocess.size if self.record.preprocess else None
            runner = TorchRunner(self.module, ["logits"], (None, 3, size, size), device="cpu")
            runner.open()
            self._classifier = Classifier(runner, self.record, Path(self.spec))
        return self._classifier.predict(source, top_k, stream=stream, batch=batch)

    def __fspath__(self) -> str:
        """Its checkpoint, as every command that takes one names it (a path, or `pretrained:NAME`): how
        `mlit_edge.bench([..., model])` benches the PyTorch model and takes it as the reference."""
        return self.spec

    def __repr__(self) -> str:
        return f"mlit_edge.Model({self.spec!r}: mLiT-{(self.record.size or '?').upper()})"


def _kinds() -> str:
    """What `load` opens, for its error: the formats' suffixes from the one table (artifacts.targets)."""
    torch = ", ".join(FORMATS["torch"].suffixes)
    others = ", ".join(x for f in FORMATS.values() if f.name != "torch" for x in f.suffixes)
    return (f"pretrained:NAME, a checkpoint ({torch}), a weights folder ({WEIGHTS} + config.json) or an "
            f"artifact ({others})")


@escaped
def load(spec: str | os.PathLike, **options: Any) -> Model | Classifier:
    """What a user holds, opened: `pretrained:NAME` (`mlit-edge pretrained` lists them), a checkpoint (`.pt`, a
    `model.safetensors` with its config.json) or a weights folder holding that pair give a `Model` (export,
    build, bench, predict in PyTorch); an artifact (.onnx, .plan, .xml) gives the runtime's `Classifier`, opened
    by `Classifier.load` (`options` are its keywords: threads, max_pixels, force ...). Anything else is refused
    in one line."""
    # '' or None would be "no checkpoint", which opens the default pretrained model: refused as the CLI refuses it
    spec = check_value(PathArg(), spec, "--checkpoint")
    if not is_pretrained(spec) and Path(spec).is_dir():
        if not (Path(spec) / WEIGHTS).is_file():
            raise ValueError(f"{printable(spec)} is not a regular file (it is a folder) and holds no {WEIGHTS}: not "
                             "a weights folder (mlit-edge export-weights writes one)")
        spec = str(Path(spec) / WEIGHTS)
    try:  # a device or pipe falls through to the source's own check, which names what it is
        special = os.path.exists(spec) and not os.path.isfile(spec)
        kind = "torch" if is_pretrained(spec) or special else artifact_format(spec).name
    except ValueError:
        raise ValueError(f"{printable(spec)}: not a model mlit_edge.load opens; give {_kinds()}") from None
    if kind != "torch":
        return Classifier.load(spec, **options)
    if options:
        raise TypeError(f"load: {', '.join(sorted(options))} are Classifier.load's options, for an artifact; "
                        f"{printable(spec)} is a checkpoint")
    return Model(spec, open_source(ExportOptions(checkpoint=spec)))

