"""Every device path, run through each JetPack's stand-ins (tests/standins): the real build, runner, classifier,
bench and GPU check code against TensorRT's bindings of that release and the cuda-python it pins.

The graphs are exported first, on the "workstation" (torch), then the stand-ins are installed and the device
side runs, as `mlit-edge export --jetpack X` then `mlit-edge build --onnx` on the Jetson would.
"""
from __future__ import annotations

import json
import logging
from pathlib import Path

import numpy as np
import pytest

from tests.helpers import load_file
from tests.standins import JETPACKS, install

ROOT = Path(__file__).resolve().parents[2]
PROFILES = list(JETPACKS)


def _export(folder: Path, profile: str, convention: str = "normalised", input_dtype: str = "float32") -> Path:
    """The tiny model's fp32 graph for `profile` (dynamic batch), with the fp16 variant beside it."""
    from mlit_edge.export.onnx_export import export_onnx
    from mlit_edge.export.source import load_for_export
    from mlit_edge.export.variants import variant_of
    from mlit_edge.devices.profiles import PROFILES as DEVICE_PROFILES
    from tests.helpers import tiny_model

    _, info = load_for_export(None, "xxs", 10, random_weights=True)
    info["model"] = {**info["model"], "size": "tiny"}
    info["preprocess"] = {**info["preprocess"], "dataset": "mnist5k"}
    folder.mkdir(parents=True, exist_ok=True)
    fp32 = folder / "m.onnx"
    export_onnx(tiny_model(), fp32, info, device=DEVICE_PROFILES[profile], convention=convention,
                input_dtype=input_dtype)
    variant_of(fp32, "fp16")
    return fp32


@pytest.fixture(scope="module")
def graphs(tmp_path_factory) -> dict:
    """profile -> the fp32 graph (its fp16 variant is beside it as m-fp16.onnx); made once per module."""
    base = tmp_path_factory.mktemp("graphs")
    out = {p: _export(base / p, p) for p in PROFILES}
    out["jetpack-5.1/uint8"] = _export(base / "uint8", "jetpack-5.1", "pixels", "uint8")
    from mlit_edge.export.calibration import Recipe
    from mlit_edge.export.variants import Inputs, variant_of

    for p in ("jetpack-5.1", "jetpack-6.2"):  # INT8 Q/DQ in TensorRT's recipe, as `export --precision int8` writes
        out[f"{p}/int8"] = variant_of(out[p], "int8", Inputs(recipe=Recipe(n=16), evaluate=False)).path
    return out


def _build(tmp_path: Path, onnx: Path, **kw):
    from mlit_edge.engine.build import BuildRequest, run_build

    return run_build(BuildRequest(onnx=str(onnx), target="tensorrt", out=str(tmp_path / "out"), **kw))


def _images(n: int = 6) -> list[np.ndarray]:
    rng = np.random.default_rng(0)
    return [rng.integers(0, 256, (36, 36, 3), dtype=np.uint8) for _ in range(n)]


# ONNX Runtime's fp16 graph at another batch size (the plan's static batch against the .onnx's whole list)
# differs in the 5th decimal; a wrong input, binding or copy differs in the first
def _onnx_probs(onnx: Path, images) -> np.ndarray:
    from mlit_edge.runtime import Classifier

    with Classifier.load(onnx) as clf:
        return np.array([p.prob for p in clf.predict(images)])


# ------------------------------------------------------------------------------------- the stand-ins bite

def test_cuda_python_11_8_refuses_cuda_12s_graph_instantiate_and_13_has_no_cudart(monkeypatch):
    """The issue's reproduction, without a GPU: cuda-python 11.8.2's cudaGraphInstantiate takes CUDA 11's three
    arguments; 12.x takes (graph, flags); 13.0 has only cuda.bindings.runtime."""
    jp = install(monkeypatch, "jetpack-5.1")
    from cuda import cudart

    with pytest.raises(TypeError, match=r"takes exactly 3 positional arguments \(2 given\)"):
        cudart.cudaGraphInstantiate(None, 0)
    with pytest.raises(ImportError):
        from cuda.bindings import runtime  # noqa: F401
    assert jp.cuda_python == "11.8.2"
    install(monkeypatch, "jetpack-6.0").cudart.cudaGraphInstantiate(None, 0)  # (graph, flags): accepted
    install(monkeypatch, "jetpack-7")
    with pytest.raises(ImportError):
        from cuda import cudart as gone  # noqa: F401
    from cuda.bindings import runtime as rt

    assert rt.__stand_in__ == "cuda-python 13.0.3"


def test_tensorrt_8_5_refuses_what_its_bindings_refuse(monkeypatch, tmp_path, graphs):
    install(monkeypatch, "jetpack-5.1")
    import tensorrt as trt

    assert not hasattr(trt.NetworkDefinitionCreationFlag, "STRONGLY_TYPED")
    logger = trt.Logger(trt.Logger.ERROR)
    builder = trt.Builder(logger)
    config = builder.create_builder_config()
    with pytest.raises(TypeError, match="incompatible function arguments"):
        config.set_calibration_profile()  # release/8.5 pyCore.cpp: "profile"_a
    network = builder.create_network(0)  # no EXPLICIT_BATCH: onnx-tensorrt 8.5 refuses the network
    parser = trt.OnnxParser(network, logger)
    assert not parser.parse_from_file(str(graphs["jetpack-5.1"]))
    assert "explicit batch" in parser.get_error(0)
    network = builder.create_network(1 << int(trt.NetworkDefinitionCreationFlag.EXPLICIT_BATCH))
    assert trt.OnnxParser(network, logger).parse_from_file(str(graphs["jetpack-5.1"]))
    with pytest.raises(AttributeError, match="read-only"):
        network.get_layer(0).type = trt.LayerType.SOFTMAX
    assert builder.build_serialized_network(network, config) is None  # dynamic batch, no profile
    # a graph for a newer parser is refused by 8.5's: LayerNormalization is not in 8.5-GA's table
    assert not trt.OnnxParser(builder.create_network(1), logger).parse_from_file(str(graphs["jetpack-6.2"]))


# -------------------------------------------------------------------------- build --onnx, predict, bench

@pytest.mark.parametrize("profile", PROFILES)
def test_build_onnx_with_batch_is_static_and_predict_runs_with_a_cuda_graph(profile, monkeypatch, tmp_path, graphs,
                                                                            caplog):
    """Items 1 and 3: `build --onnx X --batch 1` sets a static 1/1/1 profile (the log and the sidecar say so),
    and `Classifier` (CUDA graph on, its default) instantiates the graph with the installed cuda-python's
    signature and predicts what ONNX Runtime predicts on the same graph."""
    fp16 = graphs[profile].with_name("m-fp16.onnx")
    images = _images()
    want = _onnx_probs(fp16, images)
    jp = install(monkeypatch, profile)
    caplog.set_level(logging.INFO, logger="mlit_edge")
    result = _build(tmp_path, fp16, precision="fp16", batch=1)
    record = json.loads(Path(f"{result.artifact}.json").read_text())
    flags = record["engine"]["flags"]
    assert flags["profile"] == {"input": "images", "min": 1, "opt": 1, "max": 1} and record["batch"] == 1
    assert flags["tf32"] is False and flags["profiling_verbosity"] == "detailed"
    assert flags["strongly_typed"] == (profile in ("jetpack-6.2", "jetpack-7"))
    assert "(batch 1)" in caplog.text
    built = [e for e in jp.device.events if e.startswith("built:")]
    assert json.loads(built[0][len("built: "):])["profile"] == [[1, 3, 36, 36]] * 3
    from mlit_edge.runtime import Classifier

    with Classifier.load(result.artifact) as clf:
        assert clf.runner.static_batch == 1 and clf.runner.settings["cuda_graph"]
        got = np.array([p.prob for p in clf.predict(images)])
    np.testing.assert_allclose(got, want, atol=1e-4)
    assert not [e for e in jp.device.events if e.startswith("capture failed")]


def test_a_dynamic_build_keeps_its_profile_and_runs_any_batch(monkeypatch, tmp_path, graphs):
    fp16 = graphs["jetpack-6.0"].with_name("m-fp16.onnx")
    images = _images(11)
    want = _onnx_probs(fp16, images)
    install(monkeypatch, "jetpack-6.0")
    result = _build(tmp_path, fp16, precision="fp16")
    assert result.record.batch_profile == {"input": "images", "min": 1, "opt": 8, "max": 64}
    from mlit_edge.runtime import Classifier

    with Classifier.load(result.artifact) as clf:
        assert clf.runner.static_batch is None
        np.testing.assert_allclose([p.prob for p in clf.predict(images)], want, atol=1e-4)


def test_a_failed_capture_falls_back_to_plain_enqueue_with_one_notice(monkeypatch, tmp_path, graphs, caplog):
    """Item 2: a capture that fails is a notice and a plain enqueue, as trtexec does, not an exception."""
    fp16 = graphs["jetpack-5.1"].with_name("m-fp16.onnx")
    images = _images()
    want = _onnx_probs(fp16, images)
    jp = install(monkeypatch, "jetpack-5.1")
    result = _build(tmp_path, fp16, precision="fp16", batch=2)
    from mlit_edge.runtime import Classifier

    jp.device.fail_next_capture = True
    with caplog.at_level(logging.WARNING):
        with Classifier.load(result.artifact) as clf:
            got = [p.prob for p in clf.predict(images)]
            got += [p.prob for p in clf.predict(images)]
            assert clf.runner.settings["cuda_graph"] is False
    np.testing.assert_allclose(got, list(want) * 2, atol=1e-4)
    notices = [r for r in caplog.records if "cannot be captured" in r.getMessage()]
    assert len(notices) == 1 and "m-fp16.plan" in notices[0].getMessage()


def test_bench_times_a_plan_through_the_stand_in(monkeypatch, tmp_path, graphs):
    fp16 = graphs["jetpack-7"].with_name("m-fp16.onnx")
    install(monkeypatch, "jetpack-7")
    result = _build(tmp_path, fp16, precision="fp16")
    from mlit_edge.bench.call import bench

    report = bench([result.artifact], isolate=False, iterations=3, batches=(1, 8), limit=16, cuda_graph=True)
    assert not report.failed, report.failed
    assert {r["batch"] for r in report.rows} == {1, 8}
    assert all(r["format"] == "tensorrt" and r["gpu_p50_ms"] is not None and r["device_mb"] for r in report.rows)


# ---------------------------------------------------------------------------------------------- the DLA

@pytest.mark.parametrize("kind", ["float32", "uint8"])
def test_dla_int8_sets_a_calibration_profile_and_feeds_the_bindings_own_bytes(kind, monkeypatch, tmp_path, graphs):
    """Item 4 (and 3 for the DLA): `build --onnx fp32.onnx --batch 1 --dla-core 0 --precision int8` through the
    JetPack 5.1 stand-in: a static profile, the calibration profile set, and every calibration batch exactly
    the binding's bytes in the binding's type (a uint8 graph gets its pixels, not float bytes)."""
    onnx = graphs["jetpack-5.1" if kind == "float32" else "jetpack-5.1/uint8"]
    jp = install(monkeypatch, "jetpack-5.1")
    result = _build(tmp_path, onnx, precision="int8", batch=1, dla_core=0, calib_n=6)
    flags = result.record.to_json()["engine"]["flags"]
    assert flags["profile"]["min"] == flags["profile"]["max"] == 1
    assert flags["calibration_profile"] == {"input": onnx_input(onnx), "batch": 1}
    seen = jp.device.calibration
    itemsize = 4 if kind == "float32" else 1
    assert len(seen) == 6 and all(c["buffer_bytes"] == c["binding_bytes"] == 3 * 36 * 36 * itemsize for c in seen)
    from mlit_edge.export.calibration import calibration_set, resolve_recipe

    calib = calibration_set(resolve_recipe(None, 6, 0, "mnist5k"))
    fed = np.concatenate([c["data"] for c in seen])
    np.testing.assert_array_equal(fed, calib.for_graph(onnx_input(onnx), kind))


def onnx_input(onnx: Path) -> str:
    import onnx as onnx_lib

    return onnx_lib.load(str(onnx)).graph.input[0].name


def test_a_dla_plan_runs_on_its_core_and_its_uncapturable_enqueue_falls_back(monkeypatch, tmp_path, graphs, caplog):
    """Items 5 and 2: the runtime sets Runtime.DLA_core from the sidecar before deserializing (the stand-in
    refuses a DLA plan otherwise), and a DLA engine's enqueue, which cannot be captured (NVIDIA/TensorRT#3524),
    falls back to plain enqueue with one notice."""
    fp16 = graphs["jetpack-5.1"].with_name("m-fp16.onnx")
    images = _images(3)
    want = _onnx_probs(fp16, images)
    jp = install(monkeypatch, "jetpack-5.1")
    result = _build(tmp_path, fp16, precision="fp16", batch=1, dla_core=1)
    assert result.record.dla_core == 1
    from mlit_edge.runtime import Classifier

    with caplog.at_level(logging.WARNING):
        with Classifier.load(result.artifact) as clf:
            got = [p.prob for p in clf.predict(images)]
    np.testing.assert_allclose(got, want, atol=1e-4)
    assert not [e for e in jp.device.events if e.startswith("deserialize refused")]
    assert [e for e in jp.device.events if e.startswith("capture failed")]
    assert len([r for r in caplog.records if "cannot be captured" in r.getMessage()]) == 1


# ------------------------------------------------------------------------------ the device's own scripts

def _gpu_check():
    return load_file(ROOT / "benchmarks" / "gpu_check.py")


@pytest.mark.parametrize("profile", PROFILES)
def test_gpu_checks_runner_step_runs_with_each_cuda_python(profile, monkeypatch):
    gpu_check = _gpu_check()
    install(monkeypatch, profile)
    ok, figure = gpu_check.check_runner_cuda(3)
    assert ok and "identical" in figure


@pytest.mark.slow
@pytest.mark.parametrize("profile", ["jetpack-5.1", "jetpack-7"])
def test_engine_compare_builds_as_the_profile_builds_and_reads_detailed_layers(profile, monkeypatch, tmp_path):
    """Item 9: the comparison builds weakly typed on TensorRT 8.x (it built strongly typed, which 8.5 has not)
    and with detailed verbosity, so the inspector gives per-layer records, not names."""
    import mlit_edge.bench.engine_compare as engine_compare
    from mlit_edge.bench.engine_compare import compare_engines
    from mlit_edge.export import source

    real = source.load_for_export

    def small(checkpoint, size, num_classes=10, random_weights=False):
        """XXS's head size (18: the "heads" pair pads it to 24 as it pads XXS) on 3 narrow layers: what is proven
        here is how each engine is built and read, not the size (six real-size exports took 57 of its 60 s)."""
        import torch
        from dataclasses import replace

        from mlit_edge.model.mlit import MLiT, count_parameters

        xxs, info = real(checkpoint, size, num_classes, random_weights)
        torch.manual_seed(0)
        model = MLiT(replace(xxs.cfg, dim=36, depth=3, heads=2, groups=2, hidden_first=12, hidden_last=6)).eval()
        assert model.cfg.head_dim == xxs.cfg.head_dim
        data = {"name": None, "classes": info["classes"], "mean": info["preprocess"]["mean"],
                "std": info["preprocess"]["std"]}
        return model, source.model_record(model.cfg, size, data, None, None, count_parameters(model))

    monkeypatch.setattr(source, "load_for_export", small)
    monkeypatch.setattr(engine_compare, "load_for_export", small, raising=False)  # where imported at module top
    install(monkeypatch, profile)
    rows, skipped = compare_engines(__import__("tensorrt"), tmp_path, iters=2,
                                    timer=lambda fn, b, iterations: (fn(), {"median": 1.0})[1])
    assert {r["pair"] for r in rows} == {"last layer", "heads", "device"} and not skipped
    assert all(r["summary"]["layers"] > 0 for r in rows)
    dla = [r for r in rows if r["name"].startswith("DLA")]
    assert dla and dla[0]["dla"]["dla_core"] == 0


def test_tensorrt_8_5_pins_the_heads_gemm_bias_that_its_parser_leaves_unnamed(monkeypatch, tmp_path, graphs):
    """Item 10: 8.5-GA's Gemm importer adds a bias in a layer named "(Unnamed Layer* N) [ElementWise]", not
    after the node, so pinning the head's Gemm by name left its bias in fp16; the layer reading a pinned
    layer's output is pinned with it (and the other Gemms' bias layers stay fp16)."""
    fp16 = graphs["jetpack-5.1"].with_name("m-fp16.onnx")
    install(monkeypatch, "jetpack-5.1")
    result = _build(tmp_path, fp16, precision="fp16", batch=1)
    from mlit_edge.devices.trt_env import deserialize

    engine = deserialize(result.artifact.read_bytes(), result.record, result.artifact)
    import tensorrt as trt

    layers = json.loads(engine.create_engine_inspector().get_engine_information(trt.LayerInformationFormat.JSON))
    layers = layers["Layers"]
    after = {layers[i - 1]["Name"]: layers[i]["Precision"] for i in range(1, len(layers))
             if layers[i]["Name"].startswith("(Unnamed Layer")}
    assert after["node_linear"] == "FLOAT" and after["node_addmm"] == "HALF" and len(after) == 10


def test_check_sees_the_decomposed_layernorms_behind_the_fp16_casts(graphs):
    """Item 10: the 5.1 fp16 graph keeps its 7 decomposed LayerNorms in fp32 behind per-consumer Casts;
    `check` reported "none found" there."""
    import onnx

    from mlit_edge.engine.fusion import layernorm_form

    for name in ("m.onnx", "m-fp16.onnx"):
        assert layernorm_form(onnx.load(str(graphs["jetpack-5.1"].with_name(name)))).startswith("7 decomposed")


@pytest.mark.parametrize("k, refused", [(3839, False), (3840, True)])
def test_topk_k_must_be_less_than_3840(k, refused, tmp_path):
    """Item 10: onnx-tensorrt 10.1-GA's table says K "must be less than 3840"; 3840 itself was passed."""
    import onnx
    from onnx import TensorProto, helper

    from mlit_edge.engine.check import static_checks

    graph = helper.make_graph([helper.make_node("TopK", ["x", "k"], ["v", "i"], name="topk")], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4000])],
                              [helper.make_tensor_value_info("v", TensorProto.FLOAT, [1, k]),
                               helper.make_tensor_value_info("i", TensorProto.INT64, [1, k])],
                              [helper.make_tensor("k", TensorProto.INT64, [1], [k])])
    path = tmp_path / "topk.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]), str(path))
    problems = [p for p in static_checks(path).problems if p.startswith("TopK")]
    assert bool(problems) == refused and (not refused or "K < 3840" in problems[0])


@pytest.mark.parametrize("profile, cuda", [("jetpack-5.1", "11.4"), ("jetpack-6.0", "12.2"), ("jetpack-7", "13.0")])
def test_the_plan_records_the_devices_cuda_not_cuda_pythons_build_constant(profile, cuda, monkeypatch):
    """Item 10: cuda-python's cudaRuntimeGetVersion answers the version it was built against (11.8 with
    JetPack 5.1's pin), so a JetPack 5 plan said CUDA 11.8 on a CUDA 11.4 device."""
    import mlit_edge.devices.trt_env as trt_env

    install(monkeypatch, profile)
    monkeypatch.setattr(trt_env, "cuda_toolkit", lambda: None)  # no /usr/local/cuda here: the driver answers
    env = trt_env.local_env("tensorrt")
    assert env.cuda_version == cuda and env.compute_capability == "8.7" and env.trt_module == "tensorrt"


def test_the_cuda_toolkits_version_file_is_read(tmp_path):
    from mlit_edge.devices.trt_env import cuda_toolkit

    (tmp_path / "version.json").write_text('{"cuda": {"name": "CUDA SDK", "version": "11.4.315"}}')
    assert cuda_toolkit(str(tmp_path / "version.json")) == "11.4"
    assert cuda_toolkit(str(tmp_path / "missing.json")) is None


def _first_hour():
    return load_file(ROOT / "deploy" / "first_hour.py")


@pytest.mark.parametrize("profile", PROFILES)
def test_the_first_hour_script_runs_every_path_through_the_stand_ins(profile, monkeypatch, tmp_path, graphs):
    """Deliver 5: deploy/first_hour.py on each JetPack's stand-ins: every path ok, one report."""
    first_hour = _first_hour()
    onnx_dir = graphs[profile].parent
    install(monkeypatch, profile)
    lines: list[str] = []
    rows = first_hour.report(onnx_dir, tmp_path / "engines", iters=2, n=4, echo=lines.append)
    assert all(r["ok"] for r in rows), [r for r in rows if not r["ok"]]
    paths = [r["path"] for r in rows]
    assert "build m-fp16.onnx fp16 batch 1" in paths and "predict m.onnx fp32 batch 1/8/64" in paths
    assert "predict DLA core 0 m-fp16.onnx fp16" in paths and "predict DLA core 0 m.onnx int8" in paths
    text = "\n".join(lines)
    assert f"tensorrt {JETPACKS[profile][1]}" in text and f"{len(rows)} ok, 0 failed" in text
    assert f"cuda-python {install(monkeypatch, profile).cuda_python}," in text
    assert "CUDA graph off (capture failed; plain enqueue)" in text  # the DLA engines' enqueue


def test_serve_and_stream_run_a_plan_through_the_jetpack_5_1_stand_ins(monkeypatch, tmp_path, graphs):
    """`mlit-edge serve` over an inbox and `mlit-edge stream` over a video file, on a JetPack 5.1 plan (CUDA
    graphs on, cuda-python 11.8.2's signatures): every image and frame classified as ONNX Runtime does."""
    cv2 = pytest.importorskip("cv2")
    from PIL import Image

    fp16 = graphs["jetpack-5.1"].with_name("m-fp16.onnx")
    inbox = tmp_path / "inbox"
    inbox.mkdir()
    images = _images(3)
    for i, im in enumerate(images):
        Image.fromarray(im).save(inbox / f"{i}.png")
    video = tmp_path / "v.avi"
    writer = cv2.VideoWriter(str(video), cv2.VideoWriter_fourcc(*"MJPG"), 10, (36, 36))
    for im in images:
        writer.write(im[:, :, ::-1])
    writer.release()
    from mlit_edge.runtime import Classifier

    with Classifier.load(fp16) as clf:
        want = [p.class_id for p in clf.predict([str(inbox / f"{i}.png") for i in range(3)])]
    install(monkeypatch, "jetpack-5.1")
    plan = _build(tmp_path, fp16, precision="fp16", batch=1).artifact
    from mlit_edge.runtime.serve import watch
    from mlit_edge.runtime.stream import StreamOptions, run_stream

    assert watch(plan, inbox, tmp_path / "results.jsonl", interval_s=0.01, max_files=3, settle_s=0.0) == 3
    rows = sorted((json.loads(line) for line in (tmp_path / "results.jsonl").read_text().splitlines()),
                  key=lambda r: r["path"])
    assert [r["class_id"] for r in rows] == want
    import io

    out = io.StringIO()
    summary = run_stream(plan, str(video), StreamOptions(status_s=0), out)
    assert summary["classified"] == 3, summary
    assert len([line for line in out.getvalue().splitlines() if line.startswith("{")]) >= 3


def test_dla_int8_without_torch_is_refused_in_one_line_before_any_build(monkeypatch, tmp_path, graphs):
    """Found while running the device paths: the calibration images are read through torch, which a Jetson's
    runtime install has none of; the build says so in one line instead of failing on the import."""
    jp = install(monkeypatch, "jetpack-5.1")
    monkeypatch.setattr("mlit_edge.engine.build.torch_available", lambda: False)  # where the build asks
    with pytest.raises(RuntimeError, match="calibrates on the recipe's images, which are read through torch") as e:
        _build(tmp_path, graphs["jetpack-5.1"], precision="int8", batch=1, dla_core=0, calib_n=4)
    assert "\n" not in str(e.value) and not [x for x in jp.device.events if x.startswith("built")]


@pytest.mark.parametrize("profile", ["jetpack-5.1", "jetpack-6.2"])
def test_an_int8_qdq_graph_builds_as_the_profile_builds_and_predicts(profile, monkeypatch, tmp_path, graphs):
    """The GPU's INT8: the Q/DQ graph, weakly typed with the INT8 and FP16 flags on TensorRT 8.5, strongly typed
    on 10.3; the engine predicts what ONNX Runtime predicts on the same graph."""
    qdq = graphs[f"{profile}/int8"]
    images = _images()
    want = _onnx_probs(qdq, images)
    install(monkeypatch, profile)
    result = _build(tmp_path, qdq, precision="int8", batch=2)
    flags = result.record.to_json()["engine"]["flags"]
    assert flags["strongly_typed"] == (profile == "jetpack-6.2")
    assert profile == "jetpack-6.2" or (flags["int8"] and flags["fp16"] and "calibrator" not in flags)
    from mlit_edge.runtime import Classifier

    with Classifier.load(result.artifact) as clf:
        np.testing.assert_allclose([p.prob for p in clf.predict(images)], want, atol=1e-4)


def test_a_uint8_input_plan_is_fed_pixels_as_uint8(monkeypatch, tmp_path, graphs):
    """`--raw-input --input-dtype uint8` on JetPack 5.1: the plan's input binding is UINT8, the runner binds it
    as such and the classifier feeds it pixels."""
    onnx = graphs["jetpack-5.1/uint8"].with_name("m-fp16.onnx")
    images = _images()
    want = _onnx_probs(onnx, images)
    install(monkeypatch, "jetpack-5.1")
    result = _build(tmp_path, onnx, precision="fp16", batch=1)
    assert result.record.engine_io["inputs"][0]["dtype"] == "uint8"
    from mlit_edge.runtime import Classifier

    with Classifier.load(result.artifact) as clf:
        assert clf.runner.input_dtype == "uint8"
        np.testing.assert_allclose([p.prob for p in clf.predict(images)], want, atol=1e-4)
