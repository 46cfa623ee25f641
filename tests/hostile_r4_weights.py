"""Hostile round 4 (issue 47), the weights surface, as CLI replays: weights pairs (`model.safetensors` +
`config.json`) whose config is 2 GiB or a FIFO, whose safetensors header is damaged, whose tensors do not fit
their config, a pair torn by a kill between its renames, `--out ''`, and the other JSON files the package
reads at 2 GiB (a sidecar, a calibration recipe). `cases(folder, good, checkpoint)` writes each case's files
into `folder`; tests/test_hostile.py replays them. Kills with a real SIGKILL are in
tests/test_hostile_r4_weights.py."""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import struct
from pathlib import Path

from tests.hostile_corpus import Case

GIB2 = 2 ** 31


def sparse(path: Path, size: int = GIB2) -> Path:
    """`path` grown to `size` bytes with a hole: a file that large costs no disk."""
    with open(path, "ab") as f:
        f.truncate(size)
    return path


def pair(checkpoint: Path, folder: Path) -> Path:
    """The weights pair of `checkpoint` in `folder`, as export-weights writes it; its model.safetensors."""
    from mlit_edge.train.export_weights import export_weights

    export_weights(str(checkpoint), folder)
    return folder / "model.safetensors"


def repaired(weights: Path, tensors: dict | None = None, **config_changes) -> Path:
    """A pair edited as a hostile user would, then made consistent again: its tensors replaced by `tensors`
    and its config's fields by `config_changes`, the sha256 the config records updated to match."""
    from safetensors.torch import save

    config_path = weights.parent / "config.json"
    config = json.loads(config_path.read_text())
    if tensors is not None:
        blob = save(tensors)
        weights.write_bytes(blob)
        config["weights"].update(sha256=hashlib.sha256(blob).hexdigest(), bytes=len(blob))
    for key, value in config_changes.items():
        target = config
        *path, last = key.split("__")
        for part in path:
            target = target[part]
        target[last] = value
    if config_changes:  # timm's keys follow the edit, as an editor who wants the pair loaded keeps them in step
        from mlit_edge.train.hub_config import TIMM_KEYS, timm_keys

        config = {**{k: v for k, v in config.items() if k not in TIMM_KEYS}, **timm_keys(config)}
    config_path.write_text(json.dumps(config))
    return weights


def _no_dot_files(folder: Path, want: set[str]):
    def check() -> str | None:
        names = {p.name for p in folder.iterdir()}
        if names != want:
            return f"{folder.name} holds {sorted(names)}, expected {sorted(want)}"
        return None
    return check


def cases(folder: Path, good: Path, checkpoint: Path) -> list[Case]:
    """The weights surface's cases, their files written into `folder`."""
    from PIL import Image
    from safetensors.torch import load

    folder.mkdir(parents=True, exist_ok=True)
    out: list[Case] = []
    base = pair(checkpoint, folder / "base")
    tensors = load(base.read_bytes())
    config = json.loads((base.parent / "config.json").read_text())
    classes = len(config["data"]["classes"])

    def copy(name: str) -> Path:
        shutil.copytree(base.parent, folder / name)
        return folder / name / "model.safetensors"

    def export(source: Path | str, name: str, phrase: str, code: int = 1, **extra) -> Case:
        return Case(f"export-weights {name}", "weights", ["export-weights", str(source), "--out",
                                                         str(folder / f"out-{name}")], code, phrase,
                    extra={"no_folder": f"out-{name}", **extra})

    # serious 4: reads without a cap
    big = copy("big-config")
    sparse(big.parent / "config.json")
    out.append(export(big, "config.json of 2 GiB", "over the limit of 4194304 bytes (4.0 MiB) for a config.json"))
    out.append(Case("eval of a pair whose config.json is 2 GiB", "weights", ["eval", "--checkpoint", str(big)], 1,
                    "it holds 2147483648 bytes (2048.0 MiB)"))
    fifo = copy("fifo-config")
    (fifo.parent / "config.json").unlink()
    os.mkfifo(fifo.parent / "config.json")
    out.append(export(fifo, "config.json is a FIFO", "FIFO"))
    art = folder / "big-sidecar" / good.name
    art.parent.mkdir()
    shutil.copy(good, art)
    shutil.copy(f"{good}.json", f"{art}.json")
    sparse(Path(f"{art}.json"))
    digit = folder / "digit.png"
    Image.new("L", (28, 28)).save(digit)
    out.append(Case("predict with a 2 GiB sidecar", "weights", ["predict", str(digit), "--model", str(art)], 1,
                    "over the limit of 4194304 bytes (4.0 MiB) for a sidecar"))
    recipe = sparse(folder / "recipe.json")
    out.append(Case("build with a 2 GiB calibration recipe", "weights",
                    ["build", "--checkpoint", str(checkpoint), "--precision", "int8", "--target", "onnxruntime",
                     "--calib-data", str(recipe), "--out", str(folder / "out-recipe")], 1,
                    "for a calibration recipe", extra={"no_folder": "out-recipe"}))

    # minor: a damaged safetensors header is safetensors' to report, not torch.load's
    headers = {"length 2^63": struct.pack("<Q", 2 ** 63) + b'{"a":1}',
               "length one past the end": struct.pack("<Q", 8) + b'{"a":1}',
               "length 0": struct.pack("<Q", 0) + b'{"a":1}', "0 bytes": b""}
    for i, (what, content) in enumerate(headers.items()):
        path = folder / f"damaged{i}" / ("model.safetensors" if content else "empty.safetensors")
        path.parent.mkdir()
        path.write_bytes(content)
        shutil.copy(base.parent / "config.json", path.parent / "config.json")
        phrase = {"length 2^63": "header too large: its length field says 9223372036854775808 bytes",
                  "length one past the end": "invalid header length: its length field says 8 bytes, but 7 follow",
                  "length 0": "invalid header start", "0 bytes": "header too small"}[what]
        out.append(export(path, f"header {what}", phrase))
    named = folder / ".safetensors"
    shutil.copy(checkpoint, named)  # a torch.save zip under a safetensors name: the name says what it must be
    out.append(export(named, "a checkpoint named .safetensors", "not a readable safetensors file (header too large"))
    raw = folder / "damaged.pt"
    raw.write_bytes(struct.pack("<Q", 2 ** 63) + b'{"a":1}')
    out.append(export(raw, "a .pt holding a damaged safetensors header", "not a readable safetensors file"))

    # minor: pairs whose tensors do not fit their config are refused at export, in eval's words
    first = next(iter(tensors))
    misfits = {
        "an extra tensor": ({**tensors, "extra.weight": tensors[first].clone()}, {},
                            "1 that its config has no place for ('extra.weight')"),
        "a missing tensor": ({k: v for k, v in tensors.items() if k != first}, {}, f"1 missing ('{first}')"),
        "a renamed tensor": ({("renamed" if k == first else k): v for k, v in tensors.items()}, {},
                             f"1 missing ('{first}'); 1 that its config has no place for ('renamed')"),
        "100,000 junk tensors": ({**tensors, **{f"junk.{i}": tensors[first][:1].clone() for i in range(100_000)}},
                                 {}, "100000 that its config has no place for ('junk.0', 'junk.1', 'junk.10' and "
                                     "99997 more)"),
        "num_classes 0": (None, {"config__num_classes": 0},
                          f"its config's head has 0 outputs (num_classes) but data.classes names {classes}"),
        "3 class names": (None, {"data__classes": ["a", "b", "c"]},
                          f"its config's head has {classes} outputs (num_classes) but data.classes names 3"),
    }
    for i, (what, (new, changes, phrase)) in enumerate(misfits.items()):
        weights = repaired(copy(f"misfit{i}"), new, **changes)
        out.append(export(weights, f"a pair with {what}", phrase,
                          unchanged=[weights, weights.parent / "config.json"]))
        if i in (0, 4, 5):  # eval refuses in the same words, before it loads a dataset
            out.append(Case(f"eval of a pair with {what}", "weights", ["eval", "--checkpoint", str(weights)], 1,
                            phrase))

    # minor: --out '' would write into the current folder
    out.append(Case("export-weights --out ''", "weights", ["export-weights", str(checkpoint), "--out", ""], 1,
                    "--out '' names no folder",
                    extra={"check": lambda: "wrote into the current folder" if Path("config.json").exists()
                           and Path("model.safetensors").exists() else None}))

    # serious 5: a pair torn by a kill between its renames (new weights, old config, the new config pending)
    other = dict(tensors)
    other[first] = other[first] + 1
    newer = repaired(copy("newer"), other)
    torn = copy("torn")
    shutil.copy(newer, torn)
    shutil.copy(newer.parent / "config.json", torn.parent / ".config.json.pending")
    (torn.parent / ".model.safetensors.k1ll3d.tmp").write_bytes(b"left by a kill")
    out.append(Case("a torn pair loads (the pending config matches the new weights)", "weights",
                    ["export-weights", str(torn), "--out", str(folder / "from-torn")], 0,
                    extra={"check": _no_dot_files(folder / "from-torn",
                                                  {"model.safetensors", "config.json", "README.md"})}))
    out.append(Case("export-weights --force over a torn pair repairs it and removes the temporaries", "weights",
                    ["export-weights", str(checkpoint), "--out", str(torn.parent), "--force"], 0,
                    extra={"check": _no_dot_files(torn.parent, {"model.safetensors", "config.json", "README.md"})}))
    stale = copy("stale")
    (stale.parent / ".config.json.pending").write_text('{"format": "mlit-edge-weights", "weights": {}}')
    (stale.parent / "..config.json.pending.x.tmp").write_bytes(b"{")
    out.append(Case("export-weights --force drops a pending config that matches nothing", "weights",
                    ["export-weights", str(checkpoint), "--out", str(stale.parent), "--force"], 0,
                    extra={"check": _no_dot_files(stale.parent, {"model.safetensors", "config.json", "README.md"})}))
    return out
