"""A Triton Inference Server model repository for one artifact: `REPO/NAME/config.pbtxt`, the artifact as
`REPO/NAME/1/model.plan` (TensorRT) or `model.onnx` (ONNX Runtime), and its sidecar beside the config.

The config is written from the artifact itself: the platform from its format, the input and output names,
data types and dims from the engine's recorded I/O (a plan) or the graph (an ONNX), and `max_batch_size`
with dynamic batching where the batch dimension is dynamic (0 and full dims for a static batch, as
Triton's model configuration asks). The config is parsed back with Triton's own parser before it is written
(`triton_config`), and the model folder is staged in a fresh private folder (`staging`) renamed into place:
nothing is written through a link, nor deleted, that someone else put in the repository. An ONNX's external
data files go beside model.onnx (each checked to be a plain file in the artifact's folder); an ONNX that needs
a recent ONNX Runtime says so in a warning and a config comment (Triton's ORT backend ships per release).
"""
from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path
from typing import Callable, Optional

from ..runtime.artifact import BATCH_PROFILE
from ..artifacts.graph_scan import default_opset
from .graph_record import LOGITS, check_sidecar, onnx_graph_io, parse_onnx, plan_graph_io
from ..artifacts.input_convention import onnx_dtype_name
from ..artifacts.model_io import describe
from ..base.messages import require_file
from ..devices.plan_consumer import check_plan_consumer, engine_io
from ..artifacts.schema import ArtifactRecord, classifier_fields, onnxruntime_needed, recorded, version_pair
from ..artifacts.sidecar import atomic_path
from ..artifacts.staging import staged_folder
from ..artifacts.targets import FORMATS
from .triton_config import LABELS, TRITON_TYPES, Tensor, check_tensors, checked_config, placement
from ..artifacts.graph_outputs import with_probabilities

# each format Triton serves (artifacts.targets.FORMATS): its suffix -> its platform and its file in the repository
PLATFORMS = {f.suffixes[0]: (f.triton, f"model{f.suffixes[0]}") for f in FORMATS.values() if f.triton}
MAX_NAME = 128  # Triton's model names, as export-triton allows them


def _triton_type(name: str, dtype: str, path: Path) -> str:
    if dtype not in TRITON_TYPES:
        raise ValueError(f"{path.name}: tensor {name!r} has type {dtype!r}, which Triton's config cannot name")
    return TRITON_TYPES[dtype]


def plan_io(path: Path, record: ArtifactRecord) -> tuple[list[Tensor], list[Tensor]]:
    """A plan's inputs and outputs, from the engine's I/O that its sidecar records (`plan_consumer.engine_io`,
    every field checked), in Triton's types."""
    inputs, outputs = engine_io(record, path)
    return tuple([Tensor(t.name, _triton_type(t.name, t.dtype, path), t.shape) for t in side]  # type: ignore
                 for side in (inputs, outputs))


def onnx_io(path: Path, content: bytes | None = None) -> tuple[list[Tensor], list[Tensor]]:
    """An ONNX's inputs and outputs, from the graph (read without its weights); `content`: the graph as it will
    be served, when that is not the file's (a --probabilities copy)."""
    graph = parse_onnx(Path(path).read_bytes() if content is None else content, path).graph  # weights not loaded
    weights = {t.name for t in graph.initializer}

    def tensors(values) -> list[Tensor]:
        out = []
        for v in values:
            if v.name in weights:
                continue
            t = v.type.tensor_type
            dims = tuple(d.dim_value if d.HasField("dim_value") else -1 for d in t.shape.dim)
            out.append(Tensor(v.name, _triton_type(v.name, onnx_dtype_name(t.elem_type), path), dims))
        return out

    return tensors(graph.input), tensors(graph.output)


def _graph_tensors(graph):
    """Every TensorProto of a graph: initializers, sparse ones, node attributes, and those of subgraphs."""
    for t in graph.initializer:
        yield t
    for node in graph.node:
        for a in node.attribute:
            if a.HasField("t"):
                yield a.t
            yield from a.tensors
            for sparse in (*([a.sparse_tensor] if a.HasField("sparse_tensor") else []), *a.sparse_tensors):
                yield from (sparse.values, sparse.indices)
            for sub in (*([a.g] if a.HasField("g") else []), *a.graphs):
                yield from _graph_tensors(sub)
    for sparse in graph.sparse_initializer:
        yield from (sparse.values, sparse.indices)


def external_data(path: Path, file_name: str, content: bytes | None = None) -> list[str]:
    """The files beside `path` that hold its external data (each tensor's `location`), each checked to be a
    plain file name in the artifact's own folder (no '..', no directory, no absolute path, no link out of it)
    and to exist; ValueError in one line otherwise. Copied beside `file_name` (model.onnx), Triton loads it.
    `content`: the file's bytes, already read."""
    import onnx

    graph = parse_onnx(Path(path).read_bytes() if content is None else content, path).graph
    folder, names = os.path.realpath(path.parent), []
    for t in _graph_tensors(graph):
        if t.data_location != onnx.TensorProto.EXTERNAL:
            continue
        loc = {e.key: e.value for e in t.external_data}.get("location", "")
        shown = repr(loc) if len(repr(loc)) <= 120 else repr(loc)[:120] + "..."
        if (not loc or loc in (".", "..", file_name) or "/" in loc or "\\" in loc or "\0" in loc
                or os.path.isabs(loc)):
            raise ValueError(f"{path.name}: tensor {t.name[:80]!r} keeps its data in {shown}, not a file name "
                             f"beside it (nor {file_name}); refused: re-save it with onnx.save_model(..., "
                             "save_as_external_data=True, location='NAME.data')")
        source = path.parent / loc
        if os.path.dirname(os.path.realpath(source)) != folder:
            raise ValueError(f"{path.name}: its external data {shown} is a link out of its folder; refused")
        if not source.is_file():
            raise ValueError(f"{path.name} keeps its weights in {shown}, which is not beside it; copy it next "
                             f"to {path.name}")
        if loc not in names:
            names.append(loc)
    return names


def ort_notes(content: bytes, record: ArtifactRecord) -> tuple[str, ...]:
    """For an ONNX that needs a recent ONNX Runtime (an -ort artifact: opset 23 Attention, or its sidecar's
    `onnxruntime.requires`), the one line that says so: Triton's ONNX Runtime backend is its own, per release.
    No file name in it: it is also a config.pbtxt comment, which takes printable ASCII only."""
    need = onnxruntime_needed(record, default_opset(content))
    if version_pair(need) <= (0, 0):
        return ()
    return (f"this model needs ONNX Runtime {need} or newer: check that your Triton release's ONNX Runtime "
            f"backend is >= {need} (its release notes name the ONNX Runtime it ships)",)


def _max_batch(inputs: list[Tensor], record: ArtifactRecord) -> int:
    """0 for a static batch; otherwise the largest batch the artifact allows (a plan's profile maximum)."""
    if not inputs or inputs[0].shape[:1] != (-1,):
        return 0
    return int(record.max_batch or BATCH_PROFILE[-1])


def labels(record: ArtifactRecord, outputs: list[Tensor], artifact: Path) -> tuple[str, str]:
    """The output Triton's classification extension labels (the logits) and `LABELS`' text: one class name per
    line, in class order, as Triton reads it; a name holding a line break (which would shift every later
    class) or a class count that is not the output's is refused in one line."""
    classes = [str(c) for c in record.classes or ()]
    broken = [c for c in classes if re.search(r"[\r\n\x0b\x0c\x1c-\x1e\x85\u2028\u2029]", c)]
    if broken:
        raise ValueError(f"{artifact.name}.json: class name {broken[0]!r} holds a line break, which would shift "
                         f"every later class in {LABELS}; rename it")
    out = next((t for t in outputs if t.name == "logits"), outputs[0])
    if out.shape and out.shape[-1] not in (len(classes), -1):
        raise ValueError(f"{artifact.name}: its output {out.name!r} has {out.shape[-1]} classes, its sidecar "
                         f"{len(classes)}")
    return out.name, "".join(f"{c}\n" for c in classes)


def model_name(name: str | None, artifact: Path) -> str:
    """`--name`, or the artifact's file name made into one; refused in one line unless Triton accepts it."""
    what = "--name"
    if name is None:
        name, what = re.sub(r"[^A-Za-z0-9_-]", "_", artifact.name.rsplit(".", 1)[0]), \
            f"the model name from {artifact.name} (pass --name)"
    if not name:
        raise ValueError(f"{what} is empty: give the model's name in Triton (letters, digits, '_' and '-')")
    if len(name) > MAX_NAME:
        raise ValueError(f"{what} is {len(name)} characters long; Triton's model names are at most {MAX_NAME}")
    if not re.fullmatch(r"[A-Za-z0-9_-]+", name):
        raise ValueError(f"--name {name!r}: use letters, digits, '_' and '-' (Triton's model names)")
    return name


def write_repository(artifact: str | Path, repo: str | Path, name: str | None = None,
                     warn: Optional[Callable[[str], None]] = None, kind: str = "gpu",
                     engine_cache: str | None = None, probabilities: bool = False) -> Path:
    """Write the model folder for `artifact` into the repository `repo`; returns the model folder.

    Refuses an artifact that is not an mlit-edge classifier, a name Triton would not accept, a config that
    does not parse back as meant or breaks Triton's rules (`triton_config.check_config`), and a model folder
    that already exists (Triton serves every folder it finds; replacing one is the user's call). Everything is
    checked before the repository is touched. An ONNX's external data files are copied beside model.onnx; `warn`
    gets the ONNX Runtime version it needs. `kind` and `engine_cache`: where Triton runs it
    (`triton_config.placement`: "gpu", an ONNX with ONNX Runtime's TensorRT accelerator; "cpu", not for a plan).
    `probabilities`: an ONNX served with a float32 Softmax over its logits appended (`graph_outputs`); a plan
    cannot be edited, so it is refused there.
    """
    artifact, repo = Path(artifact), Path(repo)
    if artifact.suffix not in PLATFORMS:
        served_by = (f"{f.suffixes[0]} ({f.title})" for f in FORMATS.values() if f.triton)
        raise ValueError(f"{artifact.name}: Triton serves {' and '.join(served_by)} artifacts")
    require_file(artifact)  # a folder, FIFO or device is said as such
    content = artifact.read_bytes()
    record = recorded(artifact, content)  # these bytes' sha256 against the sidecar, or one line
    classifier_fields(record, artifact)
    if artifact.suffix == ".plan":  # a TensorRT-RTX plan: the TensorRT backend cannot deserialize it
        check_plan_consumer(record, artifact, "triton")
    name = model_name(name, artifact)
    platform, file_name = PLATFORMS[artifact.suffix]
    is_onnx, served = artifact.suffix == ".onnx", None
    if probabilities:
        if artifact.suffix != ".onnx":
            raise ValueError(f"--probabilities: {artifact.name} is a plan, which cannot be edited; pass the .onnx, or "
                             "build a plan from a graph that ends in probabilities")
        try:
            served = with_probabilities(content)
        except ValueError as e:
            raise ValueError(f"{artifact.name}: {e}") from None
        record = record.derive(served_output="probabilities: Softmax(logits) in float32, appended by export-triton")
    inputs, outputs = onnx_io(artifact, served or content) if is_onnx else plan_io(artifact, record)
    check_tensors(inputs, outputs, artifact.name)
    # the sidecar against its graph with predict's refusals (input convention and dtype, size, a class per score)
    graph = onnx_graph_io(parse_onnx(content, artifact)) if is_onnx else plan_graph_io(record, artifact)
    check_sidecar(record, graph, artifact, scores=LOGITS if LOGITS in graph.output_names else
                  next(iter(graph.output_names), None))  # the output `labels` names, as it picks it
    # a --probabilities copy holds its weights
    data = external_data(artifact, file_name, content) if is_onnx and served is None else []
    notes = ort_notes(content, record) if is_onnx else ()
    labelled, label_text = labels(record, outputs, artifact)
    place = placement(platform, kind, record, name, served or content, artifact.name, engine_cache)
    config = checked_config(name, platform, inputs, outputs, _max_batch(inputs, record), notes, labelled,
                            describe(record) if len(inputs) == 1 else None, place=place,
                            profile_max=None if is_onnx else record.max_batch)
    folder = repo / name
    if os.path.lexists(folder):  # a dangling link too: it is someone's
        raise FileExistsError(f"{folder} already exists; remove it or pass another --name")
    try:
        repo.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise OSError(f"cannot write the model repository {repo} ({e.strerror or e})") from None
    with staged_folder(folder) as staging:  # renamed to REPO/NAME whole, or removed (a killed run's: by the next)
        (staging / "1").mkdir()
        (staging / "1" / file_name).write_bytes(content if served is None else served)  # the bytes checked
        for data_name in data:  # checked above: plain file names in the artifact's folder
            shutil.copyfile(artifact.parent / data_name, staging / "1" / data_name)
        (staging / "config.pbtxt").write_text(config)
        (staging / LABELS).write_text(label_text, encoding="utf-8")  # label_filename is read beside the config
        with atomic_path(staging / "mlit-edge.json") as tmp:  # provenance: the sidecar, next to the config
            Path(tmp).write_text(json.dumps(record.to_json(), indent=1) + "\n")
    for note in notes:
        (warn or (lambda line: None))(note)
    return folder
