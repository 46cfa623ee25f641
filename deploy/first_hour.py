"""A Jetson's first hour: every device path of mlit-edge run for real, one pasteable report.

    python3 deploy/first_hour.py --onnx-dir models/    # the .onnx files `mlit-edge export --jetpack X` wrote

Run it on the device, in the venv deploy/install-jetson.sh made (no torch). `--onnx-dir` holds the graphs
exported on a workstation for this device's JetPack, with their sidecars, e.g.

    mlit-edge export --size xxs --jetpack 5.1 --precision fp16,int8 --out models/mlit-xxs.onnx

For each graph it builds the engine this TensorRT builds (`mlit-edge build --onnx`: dynamic 1/8/64, and
static `--batch 1`), loads it through the runtime's `Classifier` with CUDA graphs on, predicts the same images
as ONNX Runtime (where installed) and compares, times batch 1 and 8, and reads the engine's own layer
information (IEngineInspector, detailed verbosity) for fused attention. Where the TensorRT reports DLA cores it
builds the fp16 graph for DLA core 0 (and INT8 on it, calibrated from the fp32 graph) and runs that too. Each
path is a row: ok, or FAILED with its one-line error; the exit status is 1 when any row failed.

The tests run this script through each JetPack's stand-ins (tests/standins), so what it reports is what a
stand-in predicts; this script on a device is how that prediction is confirmed.
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
import traceback
from pathlib import Path
from typing import TYPE_CHECKING, Callable, List, Optional

import numpy as np

if TYPE_CHECKING:
    from mlit_edge.artifacts.schema import ArtifactRecord


def _versions() -> dict:
    from mlit_edge.devices.profiles import installed_profile
    from mlit_edge.devices.trt_env import import_trt, local_env

    trt = import_trt("tensorrt")
    env = local_env("tensorrt")
    return {"jetpack": env.jetpack, "l4t": env.l4t, "module": env.module or env.gpu_name,
            "sm": env.compute_capability, "cuda": env.cuda_version, "tensorrt": trt.__version__,
            "cuda-python": _cuda_python(), "profile": installed_profile(trt.__version__).name}


def _cuda_python() -> str:
    """The cuda-python the runtime imports: `cuda.bindings.__version__` from 12.6 (13.0 has no `cuda.__version__`),
    `cuda.__version__` in 11.8 and 12.2 (their wheels' _version.py)."""
    try:
        from cuda import bindings

        return str(bindings.__version__)
    except (ImportError, AttributeError):
        pass
    try:
        import cuda

        return str(cuda.__version__)
    except (ImportError, AttributeError):
        return "not installed"


def _images(n: int, size: int, folder: Optional[Path]) -> list:
    if folder is not None:
        return sorted(str(p) for p in folder.iterdir() if p.suffix.lower() in (".png", ".jpg", ".jpeg"))[:n]
    rng = np.random.default_rng(0)
    return [rng.integers(0, 256, (size, size, 3), dtype=np.uint8) for _ in range(n)]


def _fused_attention(plan: Path, record: ArtifactRecord) -> str:
    """The built engine's own answer: its layer count and the layers that carry a fused attention kernel."""
    from mlit_edge.bench.engine_compare import layer_summary
    from mlit_edge.devices.trt_env import deserialize, import_trt

    trt = import_trt("tensorrt")
    engine = deserialize(plan.read_bytes(), record, plan)
    summary = layer_summary(engine.create_engine_inspector().get_engine_information(trt.LayerInformationFormat.JSON))
    return f"{summary['layers']} layers, {summary['fused_attention']} fused attention"


def _run_plan(plan: Path, images: list, reference: Optional[list], iters: int) -> str:
    """Predict with CUDA graphs on, compare with ONNX Runtime's classes, time batch 1 and 8."""
    from mlit_edge.bench.stats import time_runner
    from mlit_edge.runtime import Classifier

    with Classifier.load(plan) as clf:
        preds = clf.predict(images)
        graph = "on" if clf.runner.settings.get("cuda_graph") else "off (capture failed; plain enqueue)"
        x = clf.preprocess(images)
        times = {}
        for b in (1, 8):
            if clf.runner.static_batch and b != clf.runner.static_batch:
                continue
            feed = {clf.runner.input_name: np.repeat(x[:1], b, axis=0)}
            times[b] = time_runner(lambda: clf.runner.infer(feed), b, iterations=iters, warmup_iters=3,
                                   warmup_ms=0)["median"]
    agree = ""
    if reference is not None:
        same = sum(p.class_id == r for p, r in zip(preds, reference))
        agree = f", agrees with ONNX Runtime on {same}/{len(reference)}"
    lat = ", ".join(f"p50 b{b} {ms:.3f} ms" for b, ms in times.items())
    return f"CUDA graph {graph}; {lat}{agree}"


def _onnx_classes(onnx: Path, images: list) -> Optional[list]:
    try:
        import onnxruntime  # noqa: F401  (optional on a Jetson: WITH_ORT=1)
    except ImportError:
        return None
    from mlit_edge.runtime import Classifier

    with Classifier.load(onnx) as clf:
        return [p.class_id for p in clf.predict(images)]


def report(onnx_dir: Path, out: Path, images_dir: Optional[Path] = None, n: int = 16, iters: int = 20,
           echo: Callable[[str], None] = print) -> List[dict]:
    """Run every path; returns the rows (name, ok, figure) after printing the report."""
    from mlit_edge.engine.build import BuildRequest, run_build
    from mlit_edge.devices.trt_env import import_trt

    rows: List[dict] = []

    def step(name: str, fn: Callable[[], str]) -> Optional[str]:
        try:
            figure = fn()
            rows.append({"path": name, "ok": True, "figure": figure})
            return figure
        except Exception as e:  # a failing path is a row, and the others still run
            line = str(e).strip().splitlines()[0] if str(e).strip() else ""
            rows.append({"path": name, "ok": False, "figure": f"{type(e).__name__}: {line}"})
            traceback.print_exc(file=sys.stderr)
            return None

    versions = _versions()
    graphs = sorted(onnx_dir.glob("*.onnx"))
    if not graphs:
        raise SystemExit(f"first_hour: no .onnx in {onnx_dir} (export them with mlit-edge export --jetpack ...)")
    size = json.loads(Path(f"{graphs[0]}.json").read_text())["preprocess"]["size"]
    images = _images(n, size, images_dir)
    for onnx in graphs:
        precision = json.loads(Path(f"{onnx}.json").read_text()).get("precision", "fp32")
        reference = _onnx_classes(onnx, images)
        for batch in (None, 1):
            label = f"{onnx.name} {precision} {'batch 1' if batch else 'batch 1/8/64'}"
            folder = out / f"{onnx.stem}-{batch or 'dyn'}"
            built = {}
            if step(f"build {label}", lambda: _build(run_build, BuildRequest, onnx, precision, batch, None, folder,
                                                     built)) is None:
                continue
            step(f"engine {label}", lambda: _fused_attention(built["plan"], built["record"]))
            step(f"predict {label}", lambda: _run_plan(built["plan"], images, reference, iters))
    trt = import_trt("tensorrt")
    cores = int(trt.Builder(trt.Logger(trt.Logger.ERROR)).num_DLA_cores)
    for onnx, precision in _dla_graphs(graphs) if cores else []:
        built = {}
        label = f"DLA core 0 {onnx.name} {precision}"
        if step(f"build {label}", lambda: _build(run_build, BuildRequest, onnx, precision, 1, 0,
                                                 out / f"{onnx.stem}-dla-{precision}", built)) is None:
            continue
        step(f"predict {label}", lambda: _run_plan(built["plan"], images, None, iters))
    _print(versions, rows, cores, echo)
    return rows


def _dla_graphs(graphs: List[Path]) -> list:
    """The fp16 graph for DLA FP16, the fp32 graph for DLA INT8 (calibrated: engine/dla_int8.py)."""
    by = {json.loads(Path(f"{g}.json").read_text()).get("precision", "fp32"): g for g in graphs}
    return [(by[p], q) for p, q in (("fp16", "fp16"), ("fp32", "int8")) if p in by]


def _build(run_build, request, onnx: Path, precision: str, batch, dla_core, folder: Path, built: dict) -> str:
    result = run_build(request(onnx=str(onnx), target="tensorrt", precision=precision, batch=batch, dla_core=dla_core,
                               out=str(folder)))
    record = result.record.to_json()  # the plan's sidecar as written
    built.update(plan=result.artifact, record=result.record)
    flags = record["engine"]["flags"]
    prof = flags["profile"]
    shape = f"static {prof['min']}" if prof.get("min") == prof.get("max") else f"{prof['min']}/{prof['opt']}/{prof['max']}"
    dla = flags.get("dla")
    where = (f"; DLA {dla['dla_layers']} / GPU {dla['gpu_fallback_layers']} layers ({dla.get('basis', 'requested')})"
             if dla else "")
    typing = "strongly typed" if flags["strongly_typed"] else "weakly typed"
    return f"{typing}, profile {shape}, {record['engine']['build_s']} s, {record['bytes'] / 1e6:.2f} MB{where}"


def _print(versions: dict, rows: List[dict], cores: int, echo: Callable[[str], None]) -> None:
    echo("## mlit-edge first hour")
    echo(", ".join(f"{k} {v}" for k, v in versions.items()) + f", DLA cores {cores}")
    echo("")
    echo("| path | result | measured |")
    echo("|---|---|---|")
    for r in rows:
        echo(f"| {r['path']} | {'ok' if r['ok'] else 'FAILED'} | {r['figure']} |")
    failed = sum(not r["ok"] for r in rows)
    echo("")
    echo(f"{len(rows) - failed} ok, {failed} failed")


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 epilog=__doc__.split("\n\n", 1)[1], formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--onnx-dir", type=Path, required=True, help="the exported .onnx files and their sidecars")
    ap.add_argument("--images", type=Path, help="a folder of images to predict (default: 16 synthetic images)")
    ap.add_argument("--iters", type=int, default=20, help="timed calls per batch size [%(default)s]")
    ap.add_argument("--out", type=Path, help="where the engines go (default: a temporary folder)")
    args = ap.parse_args(argv)
    if args.out is not None:
        rows = report(args.onnx_dir, args.out, args.images, iters=args.iters)
    else:
        with tempfile.TemporaryDirectory() as tmp:
            rows = report(args.onnx_dir, Path(tmp), args.images, iters=args.iters)
    return 0 if all(r["ok"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
