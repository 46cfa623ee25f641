"""`mlit-edge build`: calibration, engines and their sidecars, refusals, and kill safety."""
import json
import os
import signal
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

from mlit_edge.export.calibration import (Recipe, calibrate_int8, calibration_set, load_recipe, routing_coverage,  # noqa: E402
                                 stratified_indices)
from mlit_edge.export.static import to_deploy  # noqa: E402
from mlit_edge.export import int8_recipe  # noqa: E402
from mlit_edge.export.variants import Inputs, variant_of  # noqa: E402
from mlit_edge.engine.plan import write_plan
from mlit_edge.devices.trt_env import DeviceEnv, EngineError, check_compatible, load_engine  # noqa: E402
from mlit_edge.devices.trt_env import import_trt  # noqa: E402
from mlit_edge.artifacts.schema import ArtifactRecord  # noqa: E402
from mlit_edge.artifacts.targets import FLAVOURS  # noqa: E402
from mlit_edge.artifacts.sidecar import read_sidecar, sidecar_path  # noqa: E402
from tests.helpers import CLI, ENV, ROOT, export_tiny, run_cli, tiny_model  # noqa: E402

RTX = pytest.mark.skipif(import_trt() is None, reason="needs tensorrt or tensorrt_rtx (the dev extra installs it)")


@pytest.fixture(scope="module")
def calib() -> object:
    return calibration_set(Recipe("mnist5k", "train", 128, 0))


# --- calibration -----------------------------------------------------------------------------------

def test_stratified_indices_balance_classes_and_follow_the_seed():
    labels = np.repeat(np.arange(4), [50, 30, 5, 15])  # class 2 is small
    idx = stratified_indices(labels, 40, seed=0)
    counts = np.bincount(labels[idx], minlength=4)
    assert len(idx) == 40 == len(set(idx.tolist()))
    assert counts[2] == 5 and sorted(counts[[0, 1, 3]].tolist()) == [11, 12, 12]  # the small class runs out, the rest even
    assert np.array_equal(idx, stratified_indices(labels, 40, seed=0))
    assert not np.array_equal(idx, stratified_indices(labels, 40, seed=1))
    assert len(stratified_indices(labels, 1000, seed=0)) == 100


def test_calibration_manifest_is_stratified_and_hashes_the_pixels(calib):
    m = calib.manifest
    assert m["images"] == 128 and len(m["indices"]) == 128 and sorted(m["per_class"].values()) == [12] * 2 + [13] * 8
    assert calib.images.shape == (128, 3, 36, 36) and calib.images.dtype == np.float32
    again = calibration_set(Recipe("mnist5k", "train", 128, 0))
    other = calibration_set(Recipe("mnist5k", "train", 128, 1))
    assert again.manifest["sha256"] == m["sha256"] and other.manifest["sha256"] != m["sha256"]


def test_committed_recipes_load(tmp_path):
    recipe = load_recipe(ROOT / "calibration" / "mnist5k-512.json")
    assert recipe == Recipe("mnist5k", "train", 512, 0)
    assert load_recipe(ROOT / "calibration" / "cifar10-1024.json").n == 1024
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"dataset": "mnist5k", "images": 3}))
    with pytest.raises(ValueError, match="unknown keys"):
        load_recipe(bad)


def test_routing_coverage_counts_every_token_and_matches_pytorch(tiny_onnx, calib):
    cov = routing_coverage(tiny_onnx, calib.images, min_tokens=10 ** 9)
    model = tiny_model()
    with torch.no_grad():
        _, *routes = to_deploy(model, probe=True)(torch.from_numpy(calib.images))
    for layer, (tokens, top_i) in enumerate(zip(cov["tokens"], routes)):
        # images x tokens x k: no token is dropped (the last layer routes the dummy token alone)
        assert top_i.shape[1] == (1 if layer == len(routes) - 1 else 145) and sum(tokens) == 128 * top_i.shape[1] * 2
        assert tokens == np.bincount(top_i.numpy().reshape(-1), minlength=len(tokens)).tolist()
    # every expert under an impossible bar, but in the last layer: it routes the dummy token alone, each image's
    # one as the calibration sees it, so only an expert no token reaches there is named
    last = cov["tokens"][-1]
    assert len(cov["warnings"]) == sum(len(t) for t in cov["tokens"][:-1]) + sum(t == 0 for t in last)
    assert not any(w.startswith(f"layer {len(cov['tokens']) - 1} ") and "tokens (<" in w for w in cov["warnings"])
    zero = sum(t == 0 for layer in cov["tokens"] for t in layer)
    assert sum("--calib-n" in w for w in cov["warnings"]) == len(cov["warnings"]) - zero
    assert len(routing_coverage(tiny_onnx, calib.images, min_tokens=1)["warnings"]) == zero


@pytest.mark.slow  # four calibrations: about 6 s
def test_calibration_cache_reused_unless_model_data_or_recipe_change(tiny_onnx, calib, tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    rec, reused, _ = calibrate_int8(tiny_onnx, tmp_path / "a.int8.onnx", calib, cache)
    assert not reused and rec["calibration"]["manifest_sha256"] == calib.manifest["sha256"]
    rec_b, reused, _ = calibrate_int8(tiny_onnx, tmp_path / "b.int8.onnx", calib, cache)
    assert reused
    assert (tmp_path / "a.int8.onnx").read_bytes() == (tmp_path / "b.int8.onnx").read_bytes()
    read_sidecar(rec_b["calibration_cache"])  # the cache entry's sidecar belongs to it
    assert rec_b["calibration"] == rec["calibration"] and "cache_key" not in rec_b

    other_data = calibration_set(Recipe("mnist5k", "train", 128, 7))
    _, reused, _ = calibrate_int8(tiny_onnx, tmp_path / "c.int8.onnx", other_data, cache)
    assert not reused
    other_model = export_tiny(tmp_path / "other.onnx", seed=1)
    _, reused, _ = calibrate_int8(other_model, tmp_path / "d.int8.onnx", calib, cache)
    assert not reused
    assert len(list(cache.glob("*.int8.onnx"))) == 3
    # ONNX Runtime's INT8 of the same graph and images is its own entry, never TensorRT's file
    ort = FLAVOURS[("int8", "onnxruntime")]
    for reuse in (False, True):
        rec_o, reused, _ = calibrate_int8(tiny_onnx, tmp_path / "e.int8.onnx", calib, cache, flavour=ort)
        assert reused is reuse and rec_o["quantization"]["mode"] == "static" and rec_o["runtime"] == "onnxruntime"
    assert len(list(cache.glob("*.int8-ort.onnx"))) == 1 and len(list(cache.glob("*.int8.onnx"))) == 3
    # a changed recipe is a new entry: a cached graph of the old recipe would be served as the new one
    monkeypatch.setattr(int8_recipe, "ONNXRUNTIME", replace(int8_recipe.ONNXRUNTIME, smooth=None))
    rec_o, reused, _ = calibrate_int8(tiny_onnx, tmp_path / "f.int8.onnx", calib, cache, flavour=ort)
    assert not reused and rec_o["quantization"]["smoothing_alpha"] is None


# --- engines: sidecar, sha256, version and device checks ------------------------------------------

ORIN = DeviceEnv("tensorrt", "10.3.0", "Orin", "8.7", "12.6", "R36.4.3", "6.2", "Linux aarch64")


def fake_plan(tmp_path: Path, env: DeviceEnv = ORIN) -> Path:
    """A plan file with a real sidecar; its bytes are never deserialized by these tests."""
    plan = tmp_path / "m.plan"
    record = {"kind": "tensorrt-engine", "target": "tensorrt", "precision": "fp16", "source_onnx": "m-fp16.onnx",
              "classes": ["a", "b"], "preprocess": {"size": 36, "mean": [0.5] * 3, "std": [0.5] * 3},
              "engine": {"builder": {"module": env.trt_module, "version": env.trt_version},
                         "device": {"gpu_name": env.gpu_name, "compute_capability": env.compute_capability},
                         "flags": {"strongly_typed": True}}}
    write_plan(b"\x00engine-bytes" * 100, plan, record)
    return plan


def test_plan_sidecar_round_trip(tmp_path):
    plan = fake_plan(tmp_path)
    record = read_sidecar(plan)
    assert record["sha256"] and record["bytes"] == plan.stat().st_size and record["artifact"] == "m.plan"
    assert record["engine"]["device"]["compute_capability"] == "8.7" and record["classes"] == ["a", "b"]
    check_compatible(ArtifactRecord.from_json(record), ORIN)  # the machine it was built on accepts it


def test_tampered_plan_is_refused_before_deserializing(tmp_path):
    plan = fake_plan(tmp_path)
    data = bytearray(plan.read_bytes())
    data[5] ^= 0xFF
    plan.write_bytes(bytes(data))
    with pytest.raises(EngineError, match="sha256"):
        load_engine(plan, env=ORIN)
    sidecar_path(plan).unlink()
    with pytest.raises(FileNotFoundError, match="no sidecar"):
        load_engine(plan, env=ORIN)


def test_load_engine_deserializes_the_very_bytes_it_verified(tmp_path, monkeypatch):
    """One read: the plan is hashed from the bytes handed to TensorRT, so a file swapped after the check
    cannot slip through. TensorRT itself is faked; only what load_engine gives it is looked at."""
    import pathlib
    import types

    import mlit_edge.devices.trt_env as engine_mod
    import mlit_edge.artifacts.sidecar as sidecar_mod

    plan = fake_plan(tmp_path)
    given = []

    class Runtime:
        def __init__(self, logger):
            pass

        def deserialize_cuda_engine(self, data):
            given.append(data)
            return object()

    class Logger:
        ERROR = 0

        def __init__(self, level):
            pass

    monkeypatch.setattr(engine_mod, "import_trt", lambda target: types.SimpleNamespace(Runtime=Runtime, Logger=Logger))
    looks = []
    real_read_bytes, real_sha = pathlib.Path.read_bytes, sidecar_mod.sha256_file
    monkeypatch.setattr(pathlib.Path, "read_bytes", lambda self: looks.append(self.name) or real_read_bytes(self))
    monkeypatch.setattr(sidecar_mod, "sha256_file", lambda path, *a: looks.append(Path(path).name) or real_sha(path))
    engine, record = load_engine(plan, env=ORIN)
    assert given == [real_read_bytes(plan)] and record.precision == "fp16"
    assert looks.count("m.plan") == 1  # hashed from the bytes TensorRT got, not from a second look at the file


@pytest.mark.parametrize("local, words", [
    (replace(ORIN, trt_version="10.7.0"), "built with tensorrt 10.3.0; this machine has tensorrt 10.7.0"),
    (replace(ORIN, trt_module=None, trt_version=None), "this machine has no TensorRT"),
    (replace(ORIN, gpu_name="RTX 4090", compute_capability="8.9"), "built for Orin (sm_87); this GPU is RTX 4090"),
    (replace(ORIN, gpu_name=None, compute_capability=None), "no CUDA GPU"),
])
def test_plan_for_another_tensorrt_or_gpu_is_refused_with_the_rebuild_line(tmp_path, local, words):
    plan = fake_plan(tmp_path)
    with pytest.raises(EngineError) as err:
        load_engine(plan, env=local)
    msg = str(err.value)
    assert words in msg and "\n" not in msg
    if "no CUDA GPU" not in words:
        assert "mlit-edge build --onnx m-fp16.onnx --precision fp16 --target tensorrt" in msg


@pytest.mark.slow
@RTX
def test_build_int8_plan_from_onnx_with_tensorrt_rtx(tiny_onnx, tmp_path):
    out = tmp_path / "out"
    proc = run_cli("build", "--onnx", tiny_onnx, "--precision", "int8", "--target", "tensorrt-rtx", "--calib-n", 64,
                   "--out", out, "--no-calib-cache", "--timing-cache", tmp_path / "timing.cache", "--dynamic-batch",
                   "1,4,16")
    assert "routing coverage on 64 calibration images" in proc.stderr
    plan = out / "mlit-tiny-int8.plan"
    record = read_sidecar(plan)
    assert record["kind"] == "tensorrt-engine" and record["precision"] == "int8" and record["target"] == "tensorrt-rtx"
    eng = record["engine"]
    assert eng["builder"]["module"] == "tensorrt_rtx" and eng["flags"]["strongly_typed"]
    assert eng["flags"]["profile"] == {"input": "images", "min": 1, "opt": 4, "max": 16}
    assert eng["flags"]["timing_cache"]["written_bytes"] > 0 and (tmp_path / "timing.cache").is_file()
    assert record["source_onnx"] == "mlit-tiny-int8.onnx" and record["calibration_sha256"]
    assert record["source_onnx_sha256"] == read_sidecar(out / "mlit-tiny-int8.onnx")["sha256"]
    assert record["preprocess"]["dataset"] == "mnist5k" and len(record["classes"]) == 10
    assert (out / "mlit-tiny-int8.calib.json").is_file()


@pytest.mark.skipif(import_trt() is not None and import_trt().__name__ == "tensorrt", reason="TensorRT is installed")
def test_target_tensorrt_without_tensorrt_is_one_line(tiny_onnx, tmp_path):
    proc = run_cli("build", "--onnx", tiny_onnx, "--target", "tensorrt", "--out", tmp_path, check=False)
    assert proc.returncode == 1
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "`tensorrt` module is not installed" in lines[0] and "Traceback" not in proc.stderr
    assert not list(tmp_path.glob("*.onnx"))  # refused before doing any work


def test_bad_build_arguments_are_one_line_errors(tiny_onnx, tmp_path):
    for args, words in [(["--dynamic-batch", "8,4,16"], "MIN <= OPT <= MAX"),
                        (["--batch", "4", "--dynamic-batch", "1,4,16"], "not both"),
                        (["--onnx", tmp_path / "missing.onnx"], "does not exist"),
                        (["--calib-data", tmp_path / "nope.json", "--precision", "int8", "--onnx", tiny_onnx],
                         "does not exist")]:
        proc = run_cli("build", "--out", tmp_path / "o", "--target", "onnxruntime", *args, check=False)
        assert proc.returncode != 0 and words in proc.stderr and "Traceback" not in proc.stderr, proc.stderr


KILL_ON_PUBLISH = """
import os, signal
_replace = os.replace
def _replace_or_die(src, dst, *a, **kw):
    # SIGKILL at the instant the plan would be published: its temporary is complete, its final name absent.
    if str(dst).endswith(".plan"):
        os.kill(os.getpid(), signal.SIGKILL)
    return _replace(src, dst, *a, **kw)
os.replace = _replace_or_die
"""


@pytest.mark.slow
@RTX
def test_killed_build_leaves_no_partial_artifact(tiny_onnx, tmp_path):
    """A SIGKILL between writing and publishing the plan (deterministic: a sitecustomize kills the
    process inside os.replace, where polling for the temporary file raced the rename)."""
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(KILL_ON_PUBLISH)
    out = tmp_path / "out"
    out.mkdir()
    args = ["build", "--onnx", tiny_onnx, "--precision", "int8", "--target", "tensorrt-rtx", "--calib-n", 64,
            "--out", out, "--no-calib-cache"]
    killed = subprocess.run([*CLI, *map(str, args)], capture_output=True, text=True,
                            env={**ENV, "PYTHONPATH": f"{hook}{os.pathsep}{ROOT}"})
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    assert list(out.glob(".*.plan.*.tmp"))  # the killed build left its hidden temporary
    assert not list(out.glob("*.plan"))
    for path in out.glob("*.onnx"):  # whatever carries a final name is complete
        onnx.checker.check_model(str(path))
    done = run_cli(*args)
    assert "temporary file(s) that an interrupted build left" in done.stderr
    assert not list(out.glob(".*.tmp")) and read_sidecar(out / "mlit-tiny-int8.plan")["precision"] == "int8"


@pytest.mark.slow
def test_build_xxs_fp16_onnxruntime_and_tensorrt_rtx(tmp_path):
    """The README's first build on the real size, without a checkpoint: the shipped pretrained model's
    weights, named and recorded; the ORT artifact, and with -rtx a real plan."""
    from mlit_edge.train import pretrained

    out = tmp_path / "a"
    target = "tensorrt-rtx" if import_trt() is not None else "onnxruntime"
    proc = run_cli("build", "--size", "xxs", "--precision", "fp16", "--target", target, "--out", out)
    assert "weights: pretrained:xxs-mnist5k" in proc.stderr and "RANDOM" not in proc.stderr  # the shipped model
    rec = read_sidecar(out / "mlit-xxs-fp16.onnx")
    assert rec["precision"] == "fp16" and not rec["random_weights"] and rec["parity"]["top1_agreement"] > 0.99
    assert rec["checkpoint"] == "pretrained:xxs-mnist5k"  # recorded as such, with the shipped file's sha256
    assert rec["checkpoint_sha256"] == pretrained.entry_of("pretrained:xxs-mnist5k")["sha256"]
    assert rec["accuracy"]["top1"] >= 0.97
    assert read_sidecar(out / "mlit-xxs-fp32.onnx")["parity"]["max_abs_err"] <= 1e-4
    if target == "tensorrt-rtx":
        plan = read_sidecar(out / "mlit-xxs-fp16.plan")
        assert plan["engine"]["layers"] > 100 and plan["bytes"] > 1e5 and plan["checkpoint"] == "pretrained:xxs-mnist5k"


def test_torch_tensorrt_frontend_missing_is_one_line(tmp_path):
    import importlib.util

    if importlib.util.find_spec("torch_tensorrt") is not None:
        pytest.skip("torch_tensorrt is installed")
    proc = run_cli("build", "--size", "xxs", "--frontend", "torch-tensorrt", "--out", tmp_path, check=False)
    assert proc.returncode == 1 and "torch_tensorrt is not installed" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and not list(tmp_path.glob("*.onnx"))
    proc = run_cli("build", "--size", "xxs", "--frontend", "torch-tensorrt", "--precision", "int8", "--out", tmp_path,
                   check=False)
    assert proc.returncode == 1 and "INT8 goes through the calibrated ONNX" in proc.stderr


@pytest.mark.gpu
def test_torch_tensorrt_frontend_builds_a_plan_that_matches_pytorch(tmp_path):
    """CUDA + torch-tensorrt only: the compiled engine computes what the eval-mode model computes."""
    pytest.importorskip("torch_tensorrt")
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    from mlit_edge.engine.build import BuildRequest, run_build

    result = run_build(BuildRequest(precision="fp32", size="xxs", target="tensorrt", frontend="torch-tensorrt",
                                    batch=4, out=str(tmp_path), evaluate=False))
    engine, record = load_engine(result.artifact)
    assert read_sidecar(result.artifact)["frontend"] == "torch-tensorrt" and engine.num_io_tensors == 2


@RTX
@pytest.mark.parametrize("target", ["onnxruntime", "tensorrt-rtx"])
def test_int8_calibration_without_torch_is_refused_before_any_work(tiny_onnx, tmp_path, monkeypatch, target):
    """On a device (no torch, so no dataset reader) an fp32 ONNX cannot be calibrated: one line that says where to
    calibrate, before anything is written; the INT8 ONNX made on the workstation builds there (below)."""
    monkeypatch.setattr("mlit_edge.export.resolve.torch_available", lambda: False)
    proc = run_cli("build", "--onnx", tiny_onnx, "--precision", "int8", "--target", target, "--out", tmp_path / "o",
                   check=False)
    assert proc.returncode == 1 and "INT8 calibration reads a dataset, which needs torch" in proc.stderr
    lines = proc.stderr.strip().splitlines()  # after the random-weights banner, which this graph earns
    assert [line for line in lines if line.startswith("Error:")] == lines[-1:] and not (tmp_path / "o").exists()


def test_device_side_build_from_onnx_needs_no_torch(tiny_onnx, tmp_path):
    """The Jetson flow: an INT8 ONNX made on the workstation becomes a plan where torch and onnx are absent."""
    int8 = variant_of(tiny_onnx, "int8", Inputs(recipe=Recipe("mnist5k", "train", 64, 0), evaluate=False),
                      folder=tmp_path).path
    script = f"""
import sys
class NoTorch:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("torch", "onnx"):  # a Jetson has neither; onnxruntime is another name
            raise ImportError(name + " is blocked in this test")
sys.meta_path.insert(0, NoTorch())
from mlit_edge.cli import main
try:
    main(["build", "--onnx", {str(int8)!r}, "--precision", "int8", "--target", "tensorrt-rtx", "--out",
          {str(tmp_path / 'dev')!r}])
except SystemExit as e:
    assert e.code in (0, None), e.code
assert not any(m.split(".")[0] in ("torch", "onnx") for m in sys.modules)
"""
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=ENV)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "strongly typed engine" in proc.stderr
    assert read_sidecar(tmp_path / "dev" / "mlit-tiny-int8.plan")["calibration_sha256"]


@pytest.mark.slow
def test_variant_sidecars_keep_parity_and_accuracy_on_a_trained_checkpoint(trained_checkpoint, tmp_path):
    """Each sidecar is written once, at the end, with everything measured: a trained checkpoint's fp16
    and INT8 artifacts record both their parity against PyTorch and their held-out top-1 (the earlier
    code wrote the accuracy over a stale record and lost the parity)."""
    from mlit_edge.engine.build import BuildRequest, run_build

    _, ckpt = trained_checkpoint
    for precision in ("fp16", "int8"):
        result = run_build(BuildRequest(precision=precision, checkpoint=str(ckpt), target="onnxruntime",
                                        out=str(tmp_path), calib_n=64))
        record = read_sidecar(result.artifact)
        assert record["precision"] == precision and not record["random_weights"]
        assert record["parity"]["images"] == 1000 and 0.9 <= record["parity"]["top1_agreement"] <= 1.0
        assert record["accuracy"]["images"] == 1000 and record["accuracy"]["top1"] > 0.5
    assert not list(tmp_path.glob(".*"))  # no temporary or pending file left behind


@pytest.mark.slow
def test_int8_for_onnxruntime_runs_integer_kernels_and_is_refused_by_tensorrt(trained_checkpoint, tmp_path):
    """`--target onnxruntime --precision int8` makes the static INT8 graph ONNX Runtime runs on integer kernels
    (scales fixed by calibration, router in float) from the fused graph, whose attention op it keeps; its sidecar
    names the runtime and the calibration, and the TensorRT paths refuse it in one line."""
    from mlit_edge.engine.build import BuildRequest, run_build
    from mlit_edge.export.precision import router_nodes

    model, ckpt = trained_checkpoint
    result = run_build(BuildRequest(precision="int8", checkpoint=str(ckpt), target="onnxruntime", out=str(tmp_path),
                                    calib_n=64))
    art = result.artifact
    record = read_sidecar(art)
    assert art.name == "mlit-xxs-custom-int8-ort.onnx" and record["runtime"] == "onnxruntime"
    assert record["attention"]["form"] == "onnx" and record["source_onnx"] == "mlit-xxs-custom-fp32-ort.onnx"
    assert record["quantization"]["mode"] == "static" and record["calibration"]["coverage"]["tokens"]
    assert record["quantization"]["batch_drift"]["max_abs_logit"] <= 1e-4
    assert record["calibration"]["manifest_sha256"] in (tmp_path / "mlit-xxs-custom-int8-ort.calib.json").read_text()
    assert record["parity"]["top1_agreement"] >= 0.95 and record["accuracy"]["top1"] > 0.5
    graph = onnx.load(str(art)).graph
    ops = {n.op_type for n in graph.node}
    assert {"QuantizeLinear", "DequantizeLinear", "Attention"} <= ops and "DynamicQuantizeLinear" not in ops
    routers = router_nodes(onnx.load(str(tmp_path / "mlit-xxs-custom-fp32-ort.onnx")))  # its fused source
    producers = {o: n.op_type for n in graph.node for o in n.output}
    weights = {t.name for t in graph.initializer}
    gates = [n for n in graph.node if n.name in routers and n.op_type == "MatMul" and n.input[1] in weights]
    assert gates and all(producers[n.input[0]] == "LayerNormalization" for n in gates)  # float in, float out
    for args in (["build", "--onnx", art, "--target", "tensorrt-rtx", "--out", tmp_path / "trt"],
                 ["check", art, "--no-build"]):
        proc = run_cli(*args, check=False)
        assert proc.returncode == 1 and "made for onnxruntime, not tensorrt" in proc.stdout + proc.stderr
        assert "Traceback" not in proc.stderr
    assert not (tmp_path / "trt").exists()
