"""What only a device can decide, side by side: padded against unpadded attention heads, the last layer for the
dummy token against every token, the DLA against the GPU. Each pair is built from one model with the same
builder, timed with the same harness (`bench.stats.time_runner` through the runtime's TensorRT runner), and
its engine read back with TensorRT's `IEngineInspector`, so fusion is observed in the built engine, not
predicted from the graph. `benchmarks/gpu_check.py` runs it where TensorRT is installed; the pairs, the
inspector reading and the table are plain functions tested here without a GPU.
"""
from __future__ import annotations

import inspect
import json
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np

from ..devices.mha_rules import fusable_head
from ..devices.profiles import installed_profile
from ..devices.trt_env import deserialize, import_trt, local_env
from ..engine.plan import BuildOptions, build_serialized, engine_record, write_plan
from ..export.source import load_for_export
from ..export.variants import variant_of
from ..runtime.trt_runner import TensorRTRunner
from .stats import time_runner

# [ours] how TensorRT names the kernels of a fused attention in the inspector's layer information: the
# Myelin/MHA tactics ("_gemm_mha_v2", "fmha", "mha") appear in a layer's name, type or tactic
FUSED_ATTENTION_MARKS = ("_gemm_mha_v2", "fmha", "mha")


@dataclass(frozen=True)
class EngineVariant:
    """One engine of a comparison: the export options that make its graph and the DLA core it runs on."""

    pair: str  # the comparison it belongs to
    name: str
    export: dict = field(default_factory=dict)  # export_onnx keyword arguments
    dla_core: int | None = None


def variants(export_params: set[str], dla_cores: int, head: int) -> tuple[list[EngineVariant], list[str]]:
    """The engines to build, and one line for each comparison that cannot be made here (an export option
    this branch lacks, a head size that needs no padding, or no DLA core). `head`: the model's head size."""
    out = [EngineVariant("last layer", "every token", {"prune_last": False}),
           EngineVariant("last layer", "dummy token alone", {"prune_last": True})]
    skipped = []
    pad = fusable_head(head)
    if "pad_to" not in export_params:
        skipped.append("heads: skipped, export_onnx has no pad_to option in this build")
    elif pad == head:
        skipped.append(f"heads: skipped, head size {head} takes the fused kernel unpadded")
    else:
        out += [EngineVariant("heads", f"unpadded ({head})", {}),
                EngineVariant("heads", f"padded to {pad}", {"pad_to": pad})]
    if dla_cores > 0:
        out += [EngineVariant("device", "GPU", {}),
                EngineVariant("device", "DLA core 0 (GPU fallback)", {}, dla_core=0)]
    else:
        skipped.append("device: skipped, this TensorRT reports no DLA core (Jetson AGX/NX Orin and Xavier have them)")
    return out, skipped


def export_parameters() -> set[str]:
    """The keyword options `export_onnx` takes in this build (pad_to: each head zero-padded to a size)."""
    from ..export.onnx_export import export_onnx

    return set(inspect.signature(export_onnx).parameters)


def layer_summary(info_json: str) -> dict:
    """From `IEngineInspector.get_engine_information(LayerInformationFormat.JSON)`: the engine's layer count and
    how many layers carry a fused attention kernel, with their names."""
    info = json.loads(info_json)
    layers = info.get("Layers", []) if isinstance(info, dict) else []
    fused = []
    for layer in layers:
        text = json.dumps(layer).lower() if isinstance(layer, dict) else str(layer).lower()
        if any(mark in text for mark in FUSED_ATTENTION_MARKS):
            fused.append(layer.get("Name", "?") if isinstance(layer, dict) else str(layer))
    return {"layers": len(layers), "fused_attention": len(fused), "fused_names": fused}


def format_table(rows: list[dict], skipped: list[str]) -> str:
    """One markdown table: each engine's p50 at batch 1 and 64 (where it ran), its layers and fused attention
    layers, then the comparisons that were not made."""
    lines = ["| compare | engine | p50 ms b1 | p50 ms b64 | layers | fused attention layers | DLA/GPU layers |",
             "|---|---|---|---|---|---|---|"]
    for r in rows:
        def ms(b):
            return f"{r['p50'][b]:.3f}" if r["p50"].get(b) is not None else "-"

        dla = r.get("dla")
        split = f"{dla['dla_layers']}/{dla['gpu_fallback_layers']}" if dla else "-"
        lines.append(f"| {r['pair']} | {r['name']} | {ms(1)} | {ms(64)} | {r['summary']['layers']} | "
                     f"{r['summary']['fused_attention']} | {split} |")
    return "\n".join(lines + [f"- {s}" for s in skipped])


def compare_engines(trt, out: Path, iters: int, size: str = "xxs",
                    timer: Callable | None = None) -> tuple[list[dict], list[str]]:
    """GPU only: build each variant in fp16 (a DLA variant at a static batch 1, as the DLA needs), time it
    and read its inspector. Returns the rows for `format_table` and the skipped comparisons."""
    from ..export.onnx_export import export_onnx

    timer = timer or time_runner
    device = installed_profile(trt.__version__)  # built as `mlit-edge build` builds for this TensorRT
    builder = trt.Builder(trt.Logger(trt.Logger.ERROR))
    model, info = load_for_export(None, size, 10, random_weights=True)
    todo, skipped = variants(export_parameters(), int(builder.num_DLA_cores), model.cfg.head_dim)
    rows = []
    for i, v in enumerate(todo):
        batch = 1 if v.pair == "device" else None  # the DLA takes static shapes; its GPU twin the same
        fp32 = out / f"v{i}.onnx"
        export_onnx(model, fp32, info, batch=batch, device=device, **v.export)
        fp16 = variant_of(fp32, "fp16")
        record = fp16.record
        opts = BuildOptions(dla_core=v.dla_core, precision="fp16", strongly_typed=device.strongly_typed,
                            fp32_layers=record.fp32_layers, detailed=True)
        result = build_serialized(fp16.path, trt, opts)
        if not result["ok"]:
            raise RuntimeError(f"{v.pair}/{v.name}: {result['stage']} failed: " + " | ".join(result["errors"]))
        plan = out / f"v{i}.plan"
        written = write_plan(result["engine"], plan, engine_record(fp16.path, record, None, result,
                                                                  local_env("tensorrt"), "tensorrt",
                                                                  profile=device.record()))
        engine = deserialize(result["engine"], written, plan)  # sets the DLA core a DLA plan was built for
        summary = layer_summary(engine.create_engine_inspector().get_engine_information(
            trt.LayerInformationFormat.JSON))
        p50 = {}
        with TensorRTRunner(plan) as run:
            for b in ((1,) if batch else (1, 64)):
                x = np.zeros((b, 3, model.cfg.img_size, model.cfg.img_size), np.float32)
                p50[b] = timer(lambda: run.infer({run.input_name: x}), b, iterations=iters)["median"]
        rows.append({"pair": v.pair, "name": v.name, "p50": p50, "summary": summary,
                     "dla": result["flags"].get("dla")})
    return rows, skipped


def check_engine_pairs(iters: int) -> tuple[bool, str, list[str]]:
    """`benchmarks/gpu_check.py` step 7: every pair where TensorRT imports (skipped in one line elsewhere)."""
    try:
        trt = import_trt("tensorrt")
    except RuntimeError as e:
        return True, f"skipped: {e}", []
    with tempfile.TemporaryDirectory() as out:
        rows, skipped = compare_engines(trt, Path(out), iters)
    figure = f"{len(rows)} engines compared; {len(skipped)} comparison(s) skipped"
    return True, figure, ["", format_table(rows, skipped)]
