"""`to_deploy(model)` -> ONNX (dynamo exporter, opset 18-20), checked against PyTorch before it is published.

The attention form decides the flavour: "grouped" is the portable graph (TensorRT, any runtime); a fused
form (`ATTENTION_FORMS`, `fused_attention`) is ONNX Runtime's, whose sidecar says so (`runtime`,
`attention`, and the oldest ONNX Runtime that runs it).

The ONNX carries its provenance twice: in `metadata_props` (travels with the file) and in the
`model.onnx.json` sidecar. Every export runs itself through ONNX Runtime and compares with the
eval-mode PyTorch model before it is declared done.
"""
from __future__ import annotations

import hashlib
import json
import weakref
from pathlib import Path
from typing import TYPE_CHECKING, Callable

import numpy as np
import torch

from .. import __version__
from ..model.mlit import MLiT
from ..runtime.artifact import INPUT
from ..artifacts.input_convention import FLOAT32, INPUT_NAMES, NORMALISED, PIXELS, UINT8, from_normalised, input_record
from ..artifacts.preprocess import normalize
from ..runtime.runners import OnnxRuntimeRunner
from ..base.progress import progress
from .counted import predict_counted
from ..artifacts.schema import ArtifactRecord, check_onnxruntime
from ..artifacts.sidecar import publish, temporary_beside
from ..base.terminate import Terminated
from . import ATTENTION_FORMS, DEFAULT_OPSET, GROUPED, OPSETS, export_opset
from .quiet import quiet
from .static import onnx_translations, to_deploy
from .torch_runner import TorchRunner
from .uint8_input import take_uint8
from ..base.routing import routed_part, routing_agreement

if TYPE_CHECKING:
    from ..devices.profiles import DeviceProfile

PARITY_TOL = 1e-4
# [ours] what ONNX Runtime runs this graph with: the portable fusions; "all" adds a CPU-specific blocked
# layout for the one convolution, measured no faster (docs/export-and-build.md)
ORT_SESSION = {"graph_optimization_level": "extended"}


def raise_if_interrupted(exc: BaseException) -> None:
    """Raise KeyboardInterrupt (or SIGTERM's Terminated) if `exc` wraps one: the dynamo exporter turns Ctrl-C
    into its own "Failed to export" error, which would otherwise read as a broken model and exit 1, not 130."""
    seen: set[int] = set()
    cause: BaseException | None = exc
    while cause is not None and id(cause) not in seen:
        if isinstance(cause, (KeyboardInterrupt, Terminated)):  # SIGTERM too (base.terminate)
            raise type(cause)(*cause.args) from None
        seen.add(id(cause))
        cause = cause.__cause__ or cause.__context__


def output_names(depth: int, probe: bool) -> list[str]:
    return ["logits"] + ([f"experts_{i}" for i in range(depth)] if probe else [])


def _input_shape(model: MLiT) -> tuple[None, int, int, int]:
    return None, model.cfg.in_chans, model.cfg.img_size, model.cfg.img_size


LAST_LAYER = {True: "dummy token", False: "every token"}  # what the sidecar says the last layer computes


def attention_record(attention: str, head_size: int | None = None, pad_to: int | None = None,
                     pad_reason: str | None = None) -> dict:
    """What an export's sidecar says of its attention and the runtime it is for; with `head_size`, also the
    model's head size, the size each head was zero-padded to (None: not padded) and why."""
    heads = {} if head_size is None else {"head_size": head_size, "padded_to": pad_to, "reason": pad_reason or ""}
    if attention == GROUPED:
        return {"runtime": "any", "attention": {"form": GROUPED, "op": "MatMul, Softmax, MatMul (portable)", **heads},
                "onnxruntime": {"session": ORT_SESSION}}
    form = ATTENTION_FORMS[attention]
    return {"runtime": "onnxruntime",
            "attention": {"form": attention, "op": form.op, "kv_heads_repeated": form.repeat_kv, **heads},
            "onnxruntime": {"session": ORT_SESSION, "requires": form.onnxruntime}}


def check_installed_onnxruntime(attention: str, out: str | Path, opset: int) -> None:
    """Refuse, before the export, a fused form this machine's ONNX Runtime is too old for: its own runtime would
    refuse what is published (`artifacts.schema.check_onnxruntime`, whose line it is)."""
    try:
        import onnxruntime
    except ImportError:  # nothing here runs it: the device's runtime checks it at load
        return
    check_onnxruntime(ArtifactRecord.from_json(attention_record(attention)), onnxruntime.__version__, Path(out), opset)


def export_onnx(model: MLiT, out: str | Path, info: dict, opset: int = DEFAULT_OPSET, batch: int | None = None,
                probe: bool = False, check: bool = True, measure: Callable[[Path, ArtifactRecord], dict] | None = None,
                attention: str = GROUPED, device: "DeviceProfile | None" = None, pad_to: int | None = None,
                pad_reason: str | None = None, prune_last: bool = True, convention: str = NORMALISED,
                input_dtype: str = FLOAT32) -> dict:
    """Export `model` to `out` with its sidecar, published together once checked; returns the sidecar's JSON
    as written.

    `batch=None` makes the batch dimension dynamic; an int fixes it. With `probe`, the graph also
    outputs every layer's top-k expert indices. `measure(path, record)` adds fields (e.g. accuracy)
    measured on the file before it is published. `attention`: "grouped" (portable) or a fused form for
    ONNX Runtime, which sets the opset where the form needs its own (opset 23 for "onnx"). `device`: the
    TensorRT profile the graph is for (`devices.profiles`): an older parser's graph is rewritten for it
    (`legacy_graph.for_parser`: opset 17, LayerNorm decomposed, TopK's K an initializer) before the check, so
    the check covers the rewritten graph. `pad_to`: each head's Q, K and V zero-padded to this size (exact; the
    sidecar records it with `pad_reason`).
    `prune_last`: the last layer for the dummy token alone (the default;
    False keeps every token there, the graph of earlier releases, for before/after measurements).
    `convention`: "pixels" folds the normalisation `info["preprocess"]` records into the patch embedding
    (`raw_input`): the graph then takes RGB pixels in [0, 255], its input named `pixels`; `input_dtype` "uint8"
    makes that input uint8, read through a Cast to float32 (`uint8_input`).
    """
    import onnx

    if opset not in OPSETS:
        raise ValueError(f"opset {opset} is not supported: use one of {OPSETS} (TensorRT-buildable, native LayerNorm)")
    if batch is not None and batch < 1:
        raise ValueError("batch must be at least 1")
    out = Path(out)
    deployed = to_deploy(model, probe=probe, attention=attention, pad_to=pad_to, prune_last=prune_last)
    pre = {"mean": None, "std": None, **info.get("preprocess", {})}
    input_rec = input_record(convention, pre["mean"], pre["std"], input_dtype)  # refuses uint8 normalised input
    if convention == PIXELS:
        from .raw_input import take_pixels

        take_pixels(deployed, pre["mean"], pre["std"])
    graph_input = INPUT_NAMES[convention]
    opset = export_opset(attention, opset)
    if attention != GROUPED:
        check_installed_onnxruntime(attention, out, opset)
    names = output_names(model.cfg.depth, probe)
    example = torch.zeros(batch or 2, model.cfg.in_chans, model.cfg.img_size, model.cfg.img_size)
    dynamic = None if batch else ({0: torch.export.Dim("batch", min=1, max=4096)},)
    with temporary_beside(out) as tmp, quiet():
        try:
            with progress("torch.onnx.export"):
                program = torch.onnx.export(deployed, (example,), dynamo=True, opset_version=opset,
                                            dynamic_shapes=dynamic, input_names=[graph_input], output_names=names,
                                            verbose=False, custom_translation_table=onnx_translations(attention))
        except Exception as e:
            raise_if_interrupted(e)
            raise
        proto = program.model_proto
        meta = {"mlit_edge_version": __version__, "precision": "fp32", "classes": info["classes"],
                "preprocess": info["preprocess"], "model": info["model"],
                "input": input_rec}
        onnx.helper.set_model_props(proto, {"mlit_edge": json.dumps(meta)})
        if input_dtype == UINT8:
            take_uint8(proto, graph_input)
        rewritten = {}
        if device is not None and (device.opset < opset or device.layernorm != "native" or device.topk_k_initializer):
            from .legacy_graph import for_parser

            proto, rewritten = for_parser(proto, device.opset, device.layernorm, device.topk_k_initializer)
            opset = device.opset
        onnx.save(proto, str(tmp))
        with progress("check against PyTorch"):
            parity = verify_onnx(tmp, model, batch, probe, prune_last=prune_last, convention=convention,
                                 normalisation=(pre["mean"], pre["std"]), input_dtype=input_dtype) if check else None
        head = model.cfg.dim // model.cfg.heads
        fields = {**info, "precision": "fp32", **attention_record(attention, head, pad_to, pad_reason), "opset": opset,
                  "batch": batch or "dynamic", "probe": probe, "last_layer": LAST_LAYER[prune_last],
                  "inputs": {graph_input: ["batch" if batch is None else batch, *_input_shape(model)[1:]]},
                  "input": input_rec, "outputs": names, "parity": parity, "torch_version": torch.__version__,
                  "onnx_version": onnx.__version__}
        if device is not None:
            fields["profile"] = device.record()
            if rewritten:
                fields["parser_graph"] = rewritten
        if measure is not None:
            fields.update(measure(tmp, ArtifactRecord.from_json(fields)))
        return publish(tmp, out, fields)


def verify_onnx(path: str | Path, model: MLiT, batch: int | None, probe: bool, seed: int = 0,
                prune_last: bool = True, convention: str = NORMALISED,
                normalisation: tuple | None = None, input_dtype: str = FLOAT32) -> dict:
    """Max abs logit error of ONNX Runtime against the eval-mode PyTorch model, and routing equality. A
    "pixels" graph is fed the same inputs as pixels (`normalisation`: the mean and std folded into it); a
    uint8 one random pixels, and PyTorch their normalised values."""
    sizes = [batch] if batch else [1, 8]
    rng = np.random.default_rng(seed)
    worst, scale, routing_equal = 0.0, 1.0, True
    names = output_names(model.cfg.depth, probe)
    shape = _input_shape(model)
    with OnnxRuntimeRunner(path, session=ORT_SESSION) as ort_run, TorchRunner(model, ["logits"], shape) as ref_run, \
            TorchRunner(to_deploy(model, probe=True, prune_last=prune_last), output_names(model.cfg.depth, True),
                        shape) as route_run:
        for b in sizes:
            x = rng.standard_normal((b, model.cfg.in_chans, model.cfg.img_size, model.cfg.img_size), np.float32)
            if input_dtype == UINT8:  # whole pixels, and the normalised image PyTorch sees made from them
                feed = rng.integers(0, 256, x.shape, dtype=np.uint8)
                x = normalize(feed.transpose(0, 2, 3, 1), *normalisation)
            else:
                feed = x if convention == NORMALISED else from_normalised(x, convention, *normalisation)
            got = ort_run.infer({INPUT_NAMES[convention]: feed})
            want_logits = ref_run.infer({INPUT: x})["logits"]
            worst = max(worst, float(np.abs(got["logits"] - want_logits).max()))
            scale = max(scale, float(np.abs(want_logits).max()))
            if probe:
                want = route_run.infer({INPUT: x})
                routing_equal &= all(np.array_equal(got[n], want[n]) for n in names[1:])
    limit = PARITY_TOL * scale  # fp32 error grows with the logits' magnitude (trained models: a few units)
    if worst > limit or not routing_equal:
        raise RuntimeError(f"exported graph disagrees with PyTorch: max abs logit error {worst:.2e} "
                           f"(limit {limit:.1e} = {PARITY_TOL:.0e} x max |logit|), routing equal: {routing_equal}")
    return {"max_abs_err": worst, "limit": limit, "max_abs_logit": scale, "batches": sizes,
            "routing_equal": routing_equal if probe else None,
            "reference": "eval-mode PyTorch model, fp32"}


_REFERENCES: "weakref.WeakKeyDictionary[MLiT, tuple[str, tuple]]" = weakref.WeakKeyDictionary()


def reference_outputs(model: MLiT, images: np.ndarray, chunk: int = 100) -> tuple[np.ndarray, list, list]:
    """The eval-mode PyTorch model's logits, each layer's clean top-k (B, N, K) and clean margins (B, N) on
    `images`; computed once per model and set of images (a build makes several variants of one model),
    in chunks (one 1000-image batch holds its attention maps at once and runs slower)."""
    key = hashlib.sha1(np.ascontiguousarray(images).view(np.uint8)).hexdigest()
    cached_key, outputs = _REFERENCES.get(model, (None, None))
    if cached_key != key:  # one set of images per model is all a build uses
        logits, routes, margins = [], [], []
        with torch.no_grad(), progress("verification: PyTorch reference", len(images)) as shown:
            for i in range(0, len(images), chunk):
                x = torch.from_numpy(images[i:i + chunk])
                out, aux = model.eval()(x, return_aux=True)
                logits.append(out.numpy())
                routes.append([r.clean_i.view(len(x), -1, r.clean_i.shape[-1]).numpy() for r in aux.routings])
                margins.append([r.margin.reshape(len(x), -1).numpy() for r in aux.routings])
                shown.advance(len(x))
        layers = range(len(routes[0]))
        outputs = (np.concatenate(logits), [np.concatenate([r[i] for r in routes]) for i in layers],
                   [np.concatenate([m[i] for m in margins]) for i in layers])
        _REFERENCES[model] = (key, outputs)
    return outputs


def variant_parity(path: str | Path, model: MLiT, images: np.ndarray, proto=None,
                   normalisation: tuple | None = None) -> dict:
    """How an fp16/INT8 variant compares with the fp32 PyTorch model on real images, for its sidecar: max
    and mean abs logit error, top-1 agreement, and per layer the share of tokens that keep their experts
    beside the median margin that decides them (k-th minus (k+1)-th clean gate logit): a small margin is
    why reduced precision flips a layer's routing. `proto`: the variant's graph, when the caller holds it.
    `images`: normalised decoded images with `normalisation` (mean, std), fed as the graph's input asks."""
    return parity_of(*variant_outputs(path, images, proto, normalisation), model, images)


def variant_outputs(path: str | Path, images: np.ndarray, proto=None,
                    normalisation: tuple | None = None) -> tuple[np.ndarray, list]:
    """A variant's logits and each layer's chosen experts on `images`, through ONNX Runtime with the session
    settings its sidecar records; `variant_parity`'s arguments."""
    with OnnxRuntimeRunner(path, session=ORT_SESSION, expose_routing=True, content=proto) as run:
        return predict_counted("verification: ONNX Runtime", run, images, routes=True, normalised=normalisation)


def parity_of(got: np.ndarray, routes: list, model: MLiT, images: np.ndarray) -> dict:
    """`variant_parity`'s figures for the logits and routes any runner gave on `images` (OpenVINO's IR too)."""
    want, ref_routes, margins = reference_outputs(model, images)
    # the median margin of the tokens each layer routes (the fused graph's last layer: the dummy token alone)
    medians = [float(np.median(routed_part(m, r.shape[1]))) for m, r in zip(margins, routes)]
    err = np.abs(got - want)
    return {"max_abs_err": float(err.max()), "mean_abs_err": float(err.mean()),
            "top1_agreement": float((got.argmax(-1) == want.argmax(-1)).mean()), "images": int(len(images)),
            "routing_agreement": [round(a, 5) for a in routing_agreement(routes, ref_routes)],
            "margin_median": [round(m, 5) for m in medians],
            "routed_tokens": [int(r.shape[1]) for r in routes],  # per image, in each layer
            "reference": "eval-mode PyTorch model, fp32"}

