"""`export-deepstream`: the probabilities copy of the graph measured against softmax(logits), the nvinfer config,
labels file and deepstream-app config parsed with GLib's own key-file parser (what DeepStream reads them with)
and held to DeepStream's rules (`nvinfer_rules`, `deepstream_app_rules`), in primary and secondary mode,
nvinfer's preprocessing replayed on real images, and the plans DeepStream cannot load refused in one line."""
import json
from pathlib import Path

import numpy as np
import pytest

from mlit_edge.stacks.deepstream import APP, CALIB, CONFIG, LABELS, write_deepstream
from mlit_edge.stacks.deepstream_app import SAMPLE_PRIMARY, Secondary
from mlit_edge.stacks.deepstream_app_rules import check_app
from mlit_edge.artifacts.graph_outputs import io_facts
from mlit_edge.artifacts.input_convention import PIXELS, model_input
from mlit_edge.stacks.nvinfer_rules import ModelFacts, check_nvinfer
from mlit_edge.artifacts.preprocess import resize_images
from mlit_edge.artifacts.sidecar import read_sidecar, write_sidecar
from tests.helpers import run_cli, export_tiny, glib_keyfile, resigned_copy

pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")


@pytest.fixture(scope="module")
def pixels_onnx(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("ds-pixels")
    return export_tiny(folder / "mlit-tiny-fp32.onnx", convention=PIXELS)


@pytest.fixture(scope="module")
def variants(tiny_onnx, tmp_path_factory) -> dict:
    """The fp32 export and its fp16 and INT8 (Q/DQ, TensorRT's recipe) variants, as `mlit-edge export` makes them."""
    from mlit_edge.export.calibration import Recipe
    from mlit_edge.export.variants import Inputs, variant_of

    folder = tmp_path_factory.mktemp("ds-variants")
    inputs = Inputs(recipe=Recipe("mnist5k", "train", 64, 0), evaluate=False)
    return {"fp32": tiny_onnx, **{p: variant_of(tiny_onnx, p, inputs, folder=folder).path for p in ("fp16", "int8")}}


def _real_images(n: int = 40) -> np.ndarray:
    """Real digits at another size than the model's, resized by the runtime: what nvinfer's scaler hands on."""
    from PIL import Image

    from mlit_edge.train.data import load_dataset

    hwc = load_dataset("mnist5k", "test").hwc(slice(0, 1000, 1000 // n))
    return resize_images([np.asarray(Image.fromarray(img).resize((53, 47), Image.BILINEAR)) for img in hwc], 36)


def _facts(folder: Path, model: str, classes: int = 10) -> ModelFacts:
    inputs, outputs, quantized = io_facts((folder / model).read_bytes())
    return ModelFacts(tuple(inputs[0][2][1:]), tuple((n, d) for n, d, _ in outputs), classes, inputs[0][2][0],
                      quantized=quantized)


def test_the_files_parse_with_glib_and_say_what_the_artifact_is(tiny_onnx, tmp_path):
    out = Path(run_cli("export-deepstream", tiny_onnx, "--out", tmp_path / "ds").stdout.strip())
    prop = glib_keyfile(out / CONFIG)["property"]
    assert prop["network-type"]["int"] == 1 and prop["process-mode"]["int"] == 1
    assert prop["network-mode"]["int"] == 0 and prop["model-color-format"]["int"] == 0  # fp32, RGB
    assert prop["infer-dims"]["ints"] == [3, 36, 36] and prop["batch-size"]["int"] == 1
    model = prop["onnx-file"]["value"]
    assert model == "mlit-tiny-fp32-probabilities.onnx" and sorted(p.name for p in out.iterdir()) == sorted(
        [model, f"{model}.json", CONFIG, LABELS, APP])  # the copy alone: nvinfer never reads the logits graph
    assert prop["model-engine-file"]["value"] == f"{model}_b1_gpu0_fp32.engine"  # nvinfer's own cache name
    assert prop["output-blob-names"]["value"] == "probabilities" and prop["gie-unique-id"]["int"] == 1
    assert prop["output-io-formats"]["value"] == "probabilities:fp32:chw"
    assert prop["classifier-threshold"]["double"] == 0.0  # a probability: the top class always attached
    assert prop["scaling-filter"]["int"] == 1  # bilinear: nearest measured 4.4 points worse
    assert prop["net-scale-factor"]["double"] == pytest.approx(1 / (255 * 0.3081), rel=1e-12)
    assert prop["offsets"]["doubles"] == pytest.approx([255 * 0.1307] * 3, rel=1e-12)
    classes = json.loads(Path(f"{tiny_onnx}.json").read_text())["classes"]
    assert (out / prop["labelfile-path"]["value"]).read_text() == ";".join(classes) + "\n"
    side = read_sidecar(out / model)  # its own sidecar, matching the copy's bytes
    assert side["output"]["kind"] == "probabilities" and side["outputs"] == ["probabilities"]
    assert side["made_from"] == {"artifact": tiny_onnx.name, "sha256": read_sidecar(tiny_onnx)["sha256"]}
    app = glib_keyfile(out / APP)
    assert (out / app["primary-gie"]["config-file"]["value"]).is_file()
    assert app["source0"]["type"]["int"] == 3 and app["source0"]["uri"]["value"].startswith("file://")
    assert app["primary-gie"]["batch-size"]["int"] == app["streammux"]["batch-size"]["int"] == 1
    assert check_nvinfer(out / CONFIG, _facts(out, model)) == [] and check_app(out / APP, out / CONFIG) == []
    again = run_cli("export-deepstream", tiny_onnx, "--out", out, check=False)
    assert again.returncode == 1 and "already exists" in again.stderr


@pytest.mark.parametrize("precision", ["fp32", "fp16", "int8"])
def test_the_probabilities_copy_is_softmax_of_the_logits_and_every_config_passes(precision, variants, tmp_path):
    """The copy's one output against softmax of the original graph's logits, on real digits (ONNX Runtime):
    float32, max abs error within float32 rounding, the same top-1; its config passes DeepStream's rules."""
    from mlit_edge.runtime import Classifier

    art = variants[precision]
    out = write_deepstream(art, tmp_path / "ds")
    prop = glib_keyfile(out / CONFIG)["property"]
    copy = out / prop["onnx-file"]["value"]
    with Classifier.load(art) as clf:
        x = clf.preprocess(list(_real_images()))
    logits = ort.InferenceSession(str(art), providers=["CPUExecutionProvider"]).run(["logits"], {"images": x})[0]
    session = ort.InferenceSession(str(copy), providers=["CPUExecutionProvider"])
    assert [o.name for o in session.get_outputs()] == ["probabilities"]
    probs = session.run(None, {"images": x})[0]
    z = np.exp(logits.astype(np.float64) - logits.max(axis=1, keepdims=True))
    assert probs.dtype == np.float32 and np.abs(probs - z / z.sum(axis=1, keepdims=True)).max() < 1e-6
    assert np.array_equal(probs.argmax(axis=1), logits.argmax(axis=1))
    facts = _facts(out, copy.name)
    assert facts.quantized == (precision == "int8") and facts.outputs == (("probabilities", "float32"),)
    assert prop["network-mode"]["int"] == {"fp32": 0, "int8": 1, "fp16": 2}[precision]
    assert ("int8-calib-file" in prop) == (precision == "int8") and ((out / CALIB).is_file() == (precision == "int8"))
    assert check_nvinfer(out / CONFIG, facts) == [] and check_app(out / APP, out / CONFIG) == []


def test_a_probe_graph_copy_keeps_one_output(tmp_path):
    (tmp_path / "probe").mkdir()
    probe = export_tiny(tmp_path / "probe" / "mlit-tiny-fp32.onnx", probe=True)
    out = write_deepstream(probe, tmp_path / "ds")
    _, outputs, _ = io_facts((out / "mlit-tiny-fp32-probabilities.onnx").read_bytes())
    assert [o[0] for o in outputs] == ["probabilities"]  # the expert indices would be read as more attributes


def test_batch_and_threshold_reach_every_group_and_bad_values_are_one_line(tiny_onnx, tmp_path):
    out = Path(run_cli("export-deepstream", tiny_onnx, "--out", tmp_path / "ds", "--batch", "4", "--threshold", "0.5",
                       "--uri", "file:///clips/50%.mp4").stdout.strip())
    prop, app = glib_keyfile(out / CONFIG)["property"], glib_keyfile(out / APP)
    assert prop["batch-size"]["int"] == app["streammux"]["batch-size"]["int"] == 4
    assert app["primary-gie"]["batch-size"]["int"] == app["source0"]["num-sources"]["int"] == 4
    assert prop["model-engine-file"]["value"].endswith("_b4_gpu0_fp32.engine")
    assert app["tiled-display"]["enable"]["int"] == 1 and prop["classifier-threshold"]["double"] == 0.5
    assert app["source0"]["uri"]["value"] == "file:///clips/50%%.mp4"  # a MultiURI uri is a printf format
    for args, words in [(["--threshold", "1.5"], "a probability from 0 to 1"), (["--threshold", "-1e9"], "from 0"),
                        (["--threshold", "nan"], "from 0 to 1"), (["--batch", "0"], "1 to 1024"),
                        (["--batch", "1025"], "NVDSINFER_MAX_BATCH_SIZE")]:
        r = run_cli("export-deepstream", tiny_onnx, "--out", tmp_path / "bad", *args, check=False)
        assert r.returncode == 1 and words in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
        assert not (tmp_path / "bad").exists()


def test_a_fixed_batch_graph_is_refused_unless_nvinfer_can_build_it(tmp_path):
    from mlit_edge.export.onnx_export import export_onnx
    from mlit_edge.export.source import load_for_export
    from tests.helpers import tiny_model

    _, info = load_for_export(None, "xxs", 10, random_weights=True)
    info["preprocess"] = {**info["preprocess"], "dataset": "mnist5k", "mean": [0.1307] * 3, "std": [0.3081] * 3}
    for batch in (1, 2):
        (tmp_path / f"b{batch}").mkdir()
        export_onnx(tiny_model(), tmp_path / f"b{batch}" / "m.onnx", info, batch=batch)
    assert write_deepstream(tmp_path / "b1" / "m.onnx", tmp_path / "ds1").is_dir()
    for args, words in [([], "batch-size=1: the graph's batch is fixed at 2"),
                        (["--batch", "2"], "createDynamicParams")]:
        r = run_cli("export-deepstream", tmp_path / "b2" / "m.onnx", "--out", tmp_path / "ds2", *args, check=False)
        assert r.returncode == 1 and words in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr


def _nvinfer_inputs(convention, tiny_onnx, pixels_onnx, tmp_path):
    from mlit_edge.runtime import Classifier

    art = pixels_onnx if convention == PIXELS else tiny_onnx
    prop = glib_keyfile(write_deepstream(art, tmp_path / "ds") / CONFIG)["property"]
    scale, offsets = prop["net-scale-factor"]["double"], np.asarray(prop["offsets"]["doubles"])
    x = _real_images()  # uint8 (N, 36, 36, 3): nvinfer's x, "an int8 with range [0, 255]"
    y = (scale * (x.astype(np.float64) - offsets)).transpose(0, 3, 1, 2)  # y = net-scale-factor * (x - mean)
    with Classifier.load(art) as clf:
        want = clf.preprocess(list(x))
        assert clf.convention == convention
    return x, y, want


@pytest.mark.parametrize("convention", ["normalised", PIXELS])
def test_nvinfer_preprocessing_reproduces_the_runtime_input_to_1e_6(convention, tiny_onnx, pixels_onnx, tmp_path):
    x, y, want = _nvinfer_inputs(convention, tiny_onnx, pixels_onnx, tmp_path)
    assert want.dtype == np.float32 and np.abs(y - want).max() <= 1e-6
    assert np.array_equal(want, model_input(x, convention, [0.1307] * 3, [0.3081] * 3))


def test_a_per_channel_std_is_refused_with_the_raw_input_export_that_fixes_it(tiny_onnx, tmp_path):
    art = resigned_copy(tiny_onnx, tmp_path / "a" / "m.onnx",
                        preprocess={"size": 36, "mean": [0.485, 0.456, 0.406], "std": [0.229, 0.224, 0.225]})
    r = run_cli("export-deepstream", art, "--out", tmp_path / "ds", check=False)
    assert r.returncode == 1 and len(r.stderr.strip().splitlines()) == 1
    assert "one net-scale-factor" in r.stderr and "--raw-input" in r.stderr and "0.229, 0.224, 0.225" in r.stderr
    assert not (tmp_path / "ds").exists()


def test_a_uint8_graph_is_refused_with_the_float32_export(tmp_path):
    (tmp_path / "u8").mkdir()
    art = export_tiny(tmp_path / "u8" / "mlit-tiny-fp32.onnx", convention=PIXELS, input_dtype="uint8")
    r = run_cli("export-deepstream", art, "--out", tmp_path / "ds", check=False)
    assert r.returncode == 1 and "nvinfer feeds float32" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "ds").exists()


JETSON = {"platform": "Linux aarch64", "module": "NVIDIA Jetson Orin Nano Developer Kit", "l4t": "R36.4.3"}


def plan(folder: Path, outputs=(("probabilities", "float"),), kind="probabilities", device=JETSON,
         target="tensorrt", name="m") -> Path:
    """A .plan whose bytes are no engine, with the sidecar `mlit-edge build` writes for one built from `source_onnx`
    on `device` (export-deepstream reads the sidecar, never the engine)."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.plan"
    path.write_bytes(b"not an engine")
    io = {"inputs": [{"name": "images", "dtype": "float", "shape": [-1, 3, 36, 36]}],
          "outputs": [{"name": n, "dtype": d, "shape": [-1, 10]} for n, d in outputs]}
    write_sidecar(path, {"precision": "fp16", "classes": [str(i) for i in range(10)], "target": target,
                         "preprocess": {"size": 36, "mean": [0.5] * 3, "std": [0.5] * 3, "dataset": "mnist5k"},
                         "source_onnx": "m-fp16-probabilities.onnx", "output": {"kind": kind},
                         "kind": "tensorrt-engine", "engine": {
                             "builder": {"module": "tensorrt_rtx" if target == "tensorrt-rtx" else "tensorrt",
                                         "version": "10.3.0"},
                             "device": device, "flags": {"profile": {"min": 1, "opt": 8, "max": 16}}, "io": io}})
    return path


def test_a_jetson_plan_of_probabilities_is_named_as_the_engine(tmp_path):
    out = write_deepstream(plan(tmp_path / "p"), tmp_path / "ds", batch=8)
    prop = glib_keyfile(out / CONFIG)["property"]
    assert prop["model-engine-file"]["value"] == "m.plan" and "onnx-file" not in prop
    assert prop["network-mode"]["int"] == 2 and prop["batch-size"]["int"] == 8  # fp16; within the plan's profile
    assert "output-io-formats" not in prop and (out / "m.plan").read_bytes() == b"not an engine"
    assert prop["net-scale-factor"]["double"] == pytest.approx(1 / (255 * 0.5))


def test_plans_deepstream_cannot_load_or_read_are_refused_in_one_line(tiny_onnx, tmp_path):
    build = "mlit-edge build --onnx m-fp16-probabilities.onnx --target tensorrt"
    cases = [(plan(tmp_path / "rtx", target="tensorrt-rtx"), ["TensorRT-RTX plan", build]),
             (plan(tmp_path / "x86", device={"platform": "Linux x86_64"}), ["not on a Jetson", build, "pass the ONNX"]),
             (plan(tmp_path / "logits", outputs=(("logits", "float"),), kind=None),
              ["logits (float32)", "pass the ONNX"]),
             (plan(tmp_path / "half", outputs=(("probabilities", "half"),)), ["probabilities (float16)", "cannot be"]),
             (plan(tmp_path / "two", outputs=(("probabilities", "float"), ("experts_0", "int32"))), ["experts_0"])]
    for art, words in cases:
        r = run_cli("export-deepstream", art, "--out", tmp_path / "out", check=False)
        assert r.returncode == 1 and all(w in r.stderr for w in words), (art, r.stderr)
        assert len(r.stderr.strip().splitlines()) == 1 and not (tmp_path / "out").exists()
    r = run_cli("export-deepstream", plan(tmp_path / "ok"), "--out", tmp_path / "out", "--batch", "32", check=False)
    assert r.returncode == 1 and "profile is 1 to 16" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    r = run_cli("export-triton", cases[0][0], "--repo", tmp_path / "repo", check=False)  # the check both exports share
    assert r.returncode == 1 and "TensorRT-RTX plan" in r.stderr and build in r.stderr
    for fields, words in [({"classes": ["a;b"] + [str(i) for i in range(9)]}, "holds ';'"),
                          ({"runtime": "onnxruntime"}, "onnxruntime"),
                          ({"classes": [str(i) for i in range(11)]}, "classes lists 11 names, but the model"),
                          ({"input": {"name": "pixels", "convention": "pixels"}}, "does not belong to this graph")]:
        art = resigned_copy(tiny_onnx, tmp_path / words[:4].strip() / "m.onnx", **fields)
        r = run_cli("export-deepstream", art, "--out", tmp_path / "out", check=False)
        assert r.returncode == 1 and words in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
        assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("precision", ["fp32", "fp16", "int8"])
def test_secondary_mode_classifies_the_detectors_objects_and_every_file_passes(precision, variants, tmp_path):
    """--secondary: nvinfer on the crops of gie 1's objects (process-mode=2), its own gie-unique-id, the
    deepstream-app config with the sample detector as [primary-gie], ours as [secondary-gie0] and the tracker
    asynchronous mode needs; GLib reads every file, and DeepStream's rules pass."""
    sec = Secondary(class_ids=(0, 2), min_size=(32, 48))
    out = write_deepstream(variants[precision], tmp_path / "ds", secondary=sec)
    prop, app = glib_keyfile(out / CONFIG)["property"], glib_keyfile(out / APP)
    assert prop["process-mode"]["int"] == 2 and prop["network-type"]["int"] == 1
    assert prop["gie-unique-id"]["int"] == 2 and prop["operate-on-gie-id"]["int"] == 1
    assert prop["operate-on-class-ids"]["ints"] == [0, 2] and prop["classifier-async-mode"]["value"] == "1"
    assert prop["input-object-min-width"]["int"] == 32 and prop["input-object-min-height"]["int"] == 48
    assert prop["batch-size"]["int"] == 16 and prop["model-engine-file"]["value"].endswith(
        "_b16_gpu0_" + precision + ".engine")  # nvinfer's cache name for the objects' batch
    assert prop["maintain-aspect-ratio"]["value"] == "1" and prop["symmetric-padding"]["value"] == "1"
    assert app["primary-gie"]["config-file"]["value"] == SAMPLE_PRIMARY
    assert app["primary-gie"]["gie-unique-id"]["int"] == 1 and app["primary-gie"]["batch-size"]["int"] == 1
    sgie = app["secondary-gie0"]
    assert sgie["config-file"]["value"] == CONFIG and sgie["gie-unique-id"]["int"] == 2
    assert sgie["operate-on-gie-id"]["int"] == 1 and sgie["operate-on-class-ids"]["ints"] == [0, 2]
    assert sgie["batch-size"]["int"] == 16 and app["tracker"]["enable"]["int"] == 1
    assert app["tracker"]["ll-lib-file"]["value"].endswith("libnvds_nvmultiobjecttracker.so")
    model = prop["onnx-file"]["value"]
    assert check_nvinfer(out / CONFIG, _facts(out, model)) == [] and check_app(out / APP, out / CONFIG) == []


def test_secondary_options_reach_both_files_and_bad_ones_are_one_line(tiny_onnx, tmp_path):
    out = Path(run_cli("export-deepstream", tiny_onnx, "--out", tmp_path / "ds", "--secondary", "--operate-on-gie-id",
                       "3", "--operate-on-class-ids", "2,0", "--no-async", "--primary-config", "detector/pgie.txt",
                       "--secondary-batch", "8", "--batch", "2").stdout.strip())
    prop, app = glib_keyfile(out / CONFIG)["property"], glib_keyfile(out / APP)
    assert prop["gie-unique-id"]["int"] == 4 and prop["operate-on-gie-id"]["int"] == 3  # the detector's + 1
    assert prop["classifier-async-mode"]["value"] == "0" and "tracker" not in app  # sync: untracked objects too
    assert "input-object-min-width" not in prop and prop["batch-size"]["int"] == 8
    assert app["primary-gie"]["config-file"]["value"] == "detector/pgie.txt"  # resolved against OUT by the app
    assert app["primary-gie"]["gie-unique-id"]["int"] == 3 and app["primary-gie"]["batch-size"]["int"] == 2
    assert app["streammux"]["batch-size"]["int"] == 2 and app["secondary-gie0"]["batch-size"]["int"] == 8
    assert app["secondary-gie0"]["operate-on-class-ids"]["ints"] == [0, 2]
    for args, words in [(["--operate-on-gie-id", "0"], "1 to"), (["--operate-on-class-ids", "0;-1"], "integers >= 0"),
                        (["--operate-on-class-ids", ";".join(map(str, range(50)))], "126 characters"),
                        (["--min-object-size", "8x64"], "under 16x16"), (["--min-object-size", "64"], "WIDTHxHEIGHT"),
                        (["--secondary-batch", "0"], "1 to 1024"),
                        (["--primary-config", " p.txt"], "ends with a space")]:
        r = run_cli("export-deepstream", tiny_onnx, "--out", tmp_path / "bad", "--secondary", *args, check=False)
        assert r.returncode == 1 and words in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
        assert not (tmp_path / "bad").exists()
    r = run_cli("export-deepstream", tiny_onnx, "--out", tmp_path / "bad", "--operate-on-gie-id", "2", check=False)
    assert r.returncode == 1 and "--operate-on-gie-id: only with --secondary" in r.stderr
