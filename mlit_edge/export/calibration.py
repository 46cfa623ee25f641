"""INT8 calibration that is honest about MoE.

1. A *stratified* calibration set: the same number of images from every class (seeded), described by
   a manifest whose sha256 covers the chosen indices, labels and pixels.
2. *Routing coverage*: the fp32 graph's own TopK choices on that set, counted per layer and expert.
   With top-k routing an expert only sees the tokens routed to it, so an expert that receives few
   calibration tokens has its activation ranges set by a handful of samples; we warn and say how
   many images would give it enough.
3. QDQ from ONNX Runtime's static quantizer, in the TensorRT-accepted recipe (`precision.to_int8`) or in the
   form ONNX Runtime's CPU kernels run (`precision.to_int8_ort`), router and LayerNorm in float.
4. A cache keyed by the hashes of the fp32 ONNX, the calibration manifest, the recipe and the flavour: an
   unchanged model and data reuse the calibrated ONNX, any change recalibrates.

Recipes (`calibration/*.json`) name a dataset, split, size and seed; the resolved manifest is
written beside the INT8 artifact.
"""
from __future__ import annotations

import hashlib
import json
import math
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from ..base.routing import partial_layers
from ..artifacts.schema import recorded
from ..artifacts.targets import FLAVOURS, Flavour
from ..artifacts.sidecar import atomic_path, publish, temporary_beside, user_fields
from ..base.textfile import read_json
from ..artifacts.input_convention import NORMALISED, graph_convention, graph_input, model_input
from ..artifacts.preprocess import normalize
from ..runtime.runners import OnnxRuntimeRunner
from .counted import predict_counted

if TYPE_CHECKING:
    from .handoff import Variant

RECIPE_VERSION = 9  # bump when the settings of precision.to_int8 or to_int8_ort change (3: int8_recipe.ONNXRUNTIME;
# 4: calibrated batch by batch, precision.STRIDED; 5: int8_recipe.ONNXRUNTIME smoothed; 6: TensorRT's Q/DQ on
# inputs only, both recipes GPTQ-rounded; 7: percentile ranges from export/ranges.py; 8: those ranges read from
# the graph as written, as ONNX Runtime's calibrators read it: scales move by an ulp; 9: int8-ort's INT8 matmuls
# written as MatMulIntegerToFloat and the MoE's input projection in parts, export/integer_gemm.py)
DEFAULT_N = 512
MIN_EXPERT_TOKENS = 1000  # [ours] fewer routed tokens than this and an expert's MinMax ranges rest on little data


@dataclass(frozen=True)
class Recipe:
    """What to calibrate on: dataset name (or ImageFolder path), split, image count and seed."""

    dataset: str = "mnist5k"
    split: str = "train"
    n: int = DEFAULT_N
    seed: int = 0

    def to_dict(self) -> dict:
        return {"dataset": self.dataset, "split": self.split, "n": self.n, "seed": self.seed,
                "method": "stratified"}


def load_recipe(path: str | Path) -> Recipe:
    """A recipe JSON file such as `calibration/mnist5k-512.json`."""
    raw = read_json(path, "calibration recipe")  # bounded, and a FIFO would block no read
    if not isinstance(raw, dict):
        raise ValueError(f"calibration recipe {path}: needs a JSON object with 'dataset'")
    unknown = set(raw) - {"dataset", "split", "n", "seed", "method", "description"}
    if unknown or "dataset" not in raw:
        raise ValueError(f"calibration recipe {path}: needs 'dataset', may have split, n, seed; "
                         f"unknown keys {sorted(unknown)}")
    if raw.get("method", "stratified") != "stratified":
        raise ValueError(f"calibration recipe {path}: only the 'stratified' method exists")
    recipe = Recipe(str(raw["dataset"]), str(raw.get("split", "train")), int(raw.get("n", DEFAULT_N)),
                    int(raw.get("seed", 0)))
    if recipe.n < 1:
        raise ValueError(f"calibration recipe {path}: n must be at least 1")
    return recipe


def resolve_recipe(calib_data: str | None, n: int, seed: int, model_dataset: str | None) -> Recipe:
    """`--calib-data` as a recipe: a recipe JSON, else a dataset name or ImageFolder path (default: the
    model's own dataset, else the embedded digits) with `n` images and `seed`."""
    if calib_data and calib_data.endswith(".json"):
        return load_recipe(calib_data)
    return Recipe(calib_data or model_dataset or "mnist5k", "train", n, seed)


def stratified_indices(labels: np.ndarray, n: int, seed: int) -> np.ndarray:
    """`n` indices with every class as equally represented as its size allows (sorted, seeded)."""
    rng = np.random.default_rng(seed)
    classes = np.unique(labels)
    pools = {c: rng.permutation(np.flatnonzero(labels == c)) for c in classes}
    n = min(n, len(labels))
    take = {c: 0 for c in classes}
    left = n
    while left:  # round-robin in a seeded class order, skipping classes that ran out
        open_ = [c for c in rng.permutation(classes) if take[c] < len(pools[c])]
        for c in open_[:left]:
            take[c] += 1
        left = n - sum(take.values())
    return np.sort(np.concatenate([pools[c][:take[c]] for c in classes]))


@dataclass
class CalibrationSet:
    images: np.ndarray  # (N, 3, S, S) float32, normalized as the model expects
    manifest: dict
    pixels: np.ndarray | None = None  # the same images as decoded: uint8 (N, S, S, 3)

    @property
    def normalisation(self) -> tuple[list, list]:
        return self.manifest["mean"], self.manifest["std"]

    def for_graph(self, input_name: str, dtype: str = "float32") -> np.ndarray:
        """The images as the input of a graph whose input is `input_name` of `dtype` (its convention:
        `artifacts.input_convention`): normalised, or a `--raw-input` graph's pixels, exactly (uint8 or float32)."""
        convention = graph_convention(input_name) or NORMALISED
        if convention == NORMALISED:
            return self.images
        if self.pixels is None:
            raise ValueError("this calibration set holds no decoded pixels for a --raw-input graph")
        return model_input(self.pixels, convention, *self.normalisation, dtype)


def calibration_set(recipe: Recipe, data_root: str | Path = "data") -> CalibrationSet:
    """Load the recipe's images (preprocessed) and their manifest with its sha256."""
    from ..train.data import load_dataset

    ds = load_dataset(recipe.dataset, recipe.split, data_root)
    labels = ds.labels.numpy()
    idx = stratified_indices(labels, recipe.n, recipe.seed)
    pixels = ds.hwc(idx)  # (N, S, S, 3) uint8: hashed below, then normalised
    h = hashlib.sha256()
    for part in (idx.astype(np.int64), labels[idx].astype(np.int64), np.ascontiguousarray(pixels)):
        h.update(part.tobytes())
    per_class = {ds.classes[int(c)]: int((labels[idx] == c).sum()) for c in np.unique(labels[idx])}
    manifest = {"format": "mlit-edge-calibration-manifest", "recipe": recipe.to_dict(), "dataset": ds.name,
                "images": int(len(idx)), "split_size": len(labels), "per_class": per_class, "mean": list(ds.mean),
                "std": list(ds.std), "indices": idx.tolist(), "sha256": h.hexdigest()}
    return CalibrationSet(normalize(pixels, ds.mean, ds.std), manifest, pixels)


def write_manifest(manifest: dict, path: str | Path) -> Path:
    path = Path(path)
    with atomic_path(path) as tmp:
        tmp.write_text(json.dumps(manifest, indent=1) + "\n")
    return path


# --- routing coverage -------------------------------------------------------------------------------

def routing_coverage(onnx_path: str | Path, images: np.ndarray, batch: int = 64,
                     min_tokens: int = MIN_EXPERT_TOKENS, available: int | None = None, proto=None,
                     normalisation: tuple | None = None) -> dict:
    """Tokens each expert of each layer receives from `images` in the fp32 graph, and the warnings.

    Counts come from the graph's own TopK outputs, so they describe exactly the routing that the
    quantizer's calibration pass sees. `available` is the size of the split the images came from,
    so a suggestion never asks for more images than exist. `proto`: the graph, when the caller holds it parsed.
    `normalisation`: the (mean, std) that normalised `images`, so a `--raw-input` graph is fed pixels.
    """
    with OnnxRuntimeRunner(onnx_path, expose_routing=True, content=proto) as run:
        if not run.route_names:
            raise ValueError(f"{onnx_path} has no TopK routing: is it an mLiT export?")
        _, routes = predict_counted("routing coverage", run, images, batch, routes=True, normalised=normalisation)
        experts = run.route_experts
    counts = [np.bincount(r.reshape(-1), minlength=e or 0) for r, e in zip(routes, experts)]
    used = len(images)
    # a layer computed for the dummy token alone (ONNX Runtime's fused graph) is calibrated on every token it will
    # ever route, one an image, as the head is: no bar of many tokens an expert applies to it
    alone = partial_layers([int(r.shape[1]) for r in routes], len(routes))
    warnings = []
    for layer, c in enumerate(counts):
        for e, tokens in enumerate(c.tolist()):
            if tokens >= min_tokens or (alone[layer] and tokens):
                continue
            if tokens == 0:
                warnings.append(f"layer {layer} expert {e}: no calibration token was routed to it; its activations "
                                "are calibrated only through the other experts. Check routing on your deployment "
                                "data (mlit-edge bench with a probe export)")
            else:
                need = int(math.ceil(used * min_tokens / tokens / 64.0) * 64)
                hint = (f"--calib-n {need} would give it about {min_tokens}" if available is None or need <= available
                        else f"even all {available} images of the split would give it about "
                             f"{tokens * available // used}; its ranges rest on few samples")
                warnings.append(f"layer {layer} expert {e}: only {tokens} calibration tokens (< {min_tokens}); {hint}")
    return {"images": used, "min_tokens": min_tokens, "tokens": [c.tolist() for c in counts],
            "share": [(c / max(1, c.sum())).round(4).tolist() for c in counts], "warnings": warnings,
            "routed_tokens": [int(r.shape[1]) for r in routes]}  # per image, in each layer


def format_coverage(cov: dict) -> str:
    """Per-layer table: tokens (share) per expert, lowest marked."""
    floor = f"warn below {cov['min_tokens']}" if cov["min_tokens"] else "no minimum: nothing is calibrated"
    lines = [f"routing coverage on {cov['images']} calibration images (tokens per expert, {floor}):"]
    alone = partial_layers(cov.get("routed_tokens"), len(cov["tokens"]))
    for layer, (tokens, share) in enumerate(zip(cov["tokens"], cov["share"])):
        low = [t < cov["min_tokens"] and not (alone[layer] and t) for t in tokens]
        cells = " ".join(f"{t:>7d} ({s:4.0%}){'!' if lo else ' '}" for t, s, lo in zip(tokens, share, low))
        lines.append(f"  layer {layer:2d}: {cells}{'  (the dummy token alone)' if alone[layer] else ''}")
    lines += [f"  warning: {w}" for w in cov["warnings"]]
    return "\n".join(lines)


# --- calibration cache ------------------------------------------------------------------------------

def default_cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "mlit-edge" / "calibration"


def cache_key(onnx_sha256: str, manifest_sha256: str, tag: str = "int8") -> str:
    """The same fp32 graph, the same calibration images, the same recipe and the same flavour (`tag`: TensorRT's
    int8, ONNX Runtime's int8-ort, with the `Int8Recipe` it is made with) give the same key; two flavours never
    share one."""
    import onnxruntime

    raw = f"{onnx_sha256}|{manifest_sha256}|recipe-v{RECIPE_VERSION}|onnxruntime-{onnxruntime.__version__}|{tag}"
    return hashlib.sha256(raw.encode()).hexdigest()[:32]


class Calibrated(NamedTuple):
    info: dict  # the INT8 graph's sidecar fields, to publish
    reused: bool  # copied from the calibration cache
    proto: Any  # the graph as written; None when copied from the cache


def calibrate_int8(src: str | Path, out: str | Path, calib: CalibrationSet, cache_dir: str | Path | None = None,
                   coverage: dict | None = None, source: "Variant | None" = None,
                   flavour: Flavour = FLAVOURS[("int8", "tensorrt")]) -> Calibrated:
    """Write to `out` the INT8 QDQ ONNX of the fp32 `src` in `flavour` (TensorRT's Q/DQ, or ONNX Runtime's static
    graph); returns its sidecar fields, whether it came from the cache, and its graph. `source`: the fp32 artifact
    as the run holds it (record and parsed graph).

    The calibrated graph is cached under `cache_dir` by `cache_key`; a hit copies it instead of
    running the quantizer again. `cache_dir=None` disables the cache.
    """
    from .int8_recipe import ONNXRUNTIME, TENSORRT
    from .precision import fp32_source, to_int8, to_int8_ort

    src, out = Path(src), Path(out)
    source = fp32_source(src, source)
    manifest = calib.manifest
    calib_info = {"name": manifest["dataset"], "split": manifest["recipe"]["split"],
                  "seed": manifest["recipe"]["seed"], "manifest_sha256": manifest["sha256"],
                  "stratified": True, "per_class": manifest["per_class"]}
    if coverage is not None:
        calib_info["coverage"] = {k: coverage[k] for k in ("tokens", "min_tokens", "warnings")}
    make, recipe = {"int8-qdq": (to_int8, TENSORRT), "int8-static": (to_int8_ort, ONNXRUNTIME)}[flavour.maker]
    key = cache_key(source.sha256, manifest["sha256"], f"{flavour.tag}|{recipe!r}")  # a changed recipe: a new key
    cached = Path(cache_dir) / f"{key}.{flavour.tag}.onnx" if cache_dir else None
    if cached is not None and cached.is_file():
        try:
            cached_record = recorded(cached)  # the cached file is intact
        except (OSError, ValueError):
            pass
        else:
            shutil.copyfile(cached, out)
            info = {**user_fields(cached_record.to_json()), "calibration_cache": str(cached)}
            info.pop("cache_key", None)
            info["calibration"] = {**info["calibration"], **calib_info}
            return Calibrated(info, True, None)
    info, proto = make(src, out, calib.for_graph(*graph_input(source.graph())), calib_info, source=source,
                       recipe=recipe)
    if cached is not None:
        cached.parent.mkdir(parents=True, exist_ok=True)
        with temporary_beside(cached) as tmp:
            shutil.copyfile(out, tmp)
            publish(tmp, cached, {**info, "cache_key": key})
    return Calibrated(info, False, proto)
