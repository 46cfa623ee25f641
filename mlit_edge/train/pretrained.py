"""The pretrained models that ship inside the package, made by the project's own commands: mLiT
classifiers by `mlit-edge train`, mmLiT masked auto-encoders (to fine-tune) by `mlit-edge pretrain`.

Each is a weights pair in `mlit_edge/weights/NAME/` (`model.safetensors` and `config.json`, written by
`weights_file`), listed in `index.json` with the sha256 of both files, the exact command that produced it
and its metrics. Anywhere a checkpoint is taken, `pretrained:NAME` names one; both files are checked
against their recorded sha256 before the weights are loaded (with safetensors, never torch.load), so a
changed file is refused in one line. Maintainers add one with
`python tools/publish_pretrained.py RUN_DIR NAME --command "mlit-edge train ..."` (or "... pretrain ...").
"""
from __future__ import annotations

import hashlib
from pathlib import Path
from typing import TYPE_CHECKING

from ..base.textfile import METADATA_BYTES, read_bytes, read_json
from .weights_file import CONFIG_FILE, read_config

if TYPE_CHECKING:  # annotations only
    from ..artifacts.schema import ArtifactRecord

PREFIX = "pretrained:"
WEIGHTS = Path(__file__).resolve().parent.parent / "weights"
INDEX = WEIGHTS / "index.json"


RANDOM_WARNING = """\
!!! ------------------------------------------------------------------------------------------ !!!
!!! No --checkpoint: the weights are RANDOM. This artifact is good for latency and memory work  !!!
!!! only; its predictions are meaningless. Pass --checkpoint runs/.../checkpoint.pt for a model. !!!
!!! ------------------------------------------------------------------------------------------ !!!"""


class PretrainedError(ValueError):
    """A pretrained model that does not exist or whose file was changed."""


def index() -> dict[str, dict]:
    """Every shipped pretrained model by name (an empty dict when none ships)."""
    return read_json(INDEX, "pretrained index", hint="reinstall mlit-edge")["models"] if INDEX.is_file() else {}


def is_pretrained(spec: str | Path) -> bool:
    return str(spec).startswith(PREFIX)


def kind_of(entry: dict) -> str:
    """"mlit" for a classifier, "mmlit" for a masked auto-encoder (entries before mmLiT shipped are mLiT)."""
    return entry.get("kind", "mlit")


def default_for(size: str, num_classes: int | None = None) -> str | None:
    """The `pretrained:NAME` a size builds from when no checkpoint is given (None when none ships)."""
    for name, entry in index().items():
        if (kind_of(entry) == "mlit" and entry["size"] == size and entry.get("default")
                and num_classes in (None, len(entry["classes"]))):
            return PREFIX + name
    return None


def entry_of(spec: str | Path) -> dict:
    name = spec_name(spec)
    models = index()
    if name not in models:
        have = ", ".join(PREFIX + n for n in models) or "none ships with this install"
        raise PretrainedError(f"{spec}: no such pretrained model ({have}; list them with mlit-edge pretrained)")
    return models[name]


def _checked(spec: str | Path, path: Path, sha256: str, limit: int | None = None) -> bytes:
    """The bytes of one file of a pretrained model, once their sha256 matches the recorded one (and, with
    `limit`, once they are at most that many: a config, where the weights have no such bound)."""
    try:
        content = path.read_bytes() if limit is None else read_bytes(path, CONFIG_FILE, limit)
    except OSError as e:
        raise PretrainedError(f"{spec}: cannot read {path} ({e.strerror or e}); reinstall mlit-edge") from None
    if hashlib.sha256(content).hexdigest() != sha256:
        raise PretrainedError(f"{spec}: {path} does not match its recorded sha256 (the file was changed or "
                              "damaged); reinstall mlit-edge")
    return content


def read_pretrained(spec: str | Path) -> tuple[Path, bytes]:
    """The weights file (`NAME/model.safetensors`) and bytes of a pretrained model, once its sha256 and its
    `config.json`'s match the recorded ones (so a changed config is refused as a changed weights file is)."""
    entry = entry_of(spec)
    path = WEIGHTS / entry["file"]
    content = _checked(spec, path, entry["sha256"])
    _checked(spec, path.parent / CONFIG_FILE, entry["config_sha256"], METADATA_BYTES)
    return path, content


def shipped_config(weights: Path, content: bytes) -> bytes:
    """The `config.json` beside a `model.safetensors` whose bytes are `content`; for a shipped model, both
    checked against the sha256s the index records (loading it by path gets the same check as `pretrained:NAME`)."""
    for name, entry in index().items():
        if (WEIGHTS / entry["file"]).resolve() == Path(weights).resolve():
            if hashlib.sha256(content).hexdigest() != entry["sha256"]:
                raise PretrainedError(f"{PREFIX}{name}: {weights} does not match its recorded sha256 (the file "
                                      "was changed or damaged); reinstall mlit-edge")
            return _checked(PREFIX + name, Path(weights).parent / CONFIG_FILE, entry["config_sha256"], METADATA_BYTES)
    return read_config(Path(weights), content)


def describe_spec(spec: str | Path) -> str:
    """One line for banners: what the model is and how accurate it is."""
    e = entry_of(spec)
    if kind_of(e) == "mmlit":
        return (f"{spec}: mmLiT-{e['size'].upper()} pre-trained by mlit-edge as a masked auto-encoder on "
                f"{e['dataset']}'s {e['train_images']} training images, labels unused, final loss {e['final_loss']:.4f} "
                f"(sha256 {e['sha256'][:12]})")
    return (f"{spec}: mLiT-{e['size'].upper()} trained on {e['dataset']} by mlit-edge, top-1 {e['top1']:.4f} on "
            f"{e['test_images']} held-out images (sha256 {e['sha256'][:12]})")


def spec_name(spec: str | Path) -> str:
    """NAME of `pretrained:NAME` (or of a bare NAME)."""
    return str(spec).removeprefix(PREFIX)


def weights_banner(record: ArtifactRecord, checkpoint_given: bool) -> str | None:
    """What a build or export says about its weights: the random-weights warning, or the shipped
    pretrained model it took for want of a checkpoint; None when the user named the source."""
    if record.random_weights:
        return RANDOM_WARNING
    if checkpoint_given:
        return None
    return f"weights: {describe_spec(record.checkpoint)}; --random-weights gives random weights instead"

