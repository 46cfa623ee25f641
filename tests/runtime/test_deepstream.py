"""`export-deepstream`: the nvinfer classifier config, its labels file and a deepstream-app config, parsed with
GLib's own key-file parser (what DeepStream reads them with), and nvinfer's preprocessing replayed on real
images against the runtime's own input tensor."""
import json
from pathlib import Path

import numpy as np
import pytest

from mlit_edge.runtime.deepstream import APP, CONFIG, LABELS, write_deepstream
from mlit_edge.runtime.input_convention import PIXELS, model_input
from mlit_edge.runtime.preprocess import resize_images
from tests.helpers import cli, export_tiny, fake_plan, glib_keyfile, resigned_copy

pytest.importorskip("onnx")


@pytest.fixture(scope="module")
def pixels_onnx(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("ds-pixels")
    return export_tiny(folder / "mlit-tiny-fp32.onnx", convention=PIXELS)


def test_the_files_parse_with_glib_and_say_what_the_artifact_is(tiny_onnx, tmp_path):
    out = Path(cli("export-deepstream", tiny_onnx, "--out", tmp_path / "ds").stdout.strip())
    prop = glib_keyfile(out / CONFIG)["property"]
    assert prop["network-type"]["int"] == 1 and prop["process-mode"]["int"] == 1
    assert prop["network-mode"]["int"] == 0 and prop["model-color-format"]["int"] == 0  # fp32, RGB
    assert prop["infer-dims"]["ints"] == [3, 36, 36] and prop["batch-size"]["int"] == 1
    assert prop["onnx-file"]["value"] == tiny_onnx.name and (out / tiny_onnx.name).read_bytes() == tiny_onnx.read_bytes()
    assert prop["output-blob-names"]["value"] == "logits" and prop["gie-unique-id"]["int"] == 1
    assert prop["classifier-threshold"]["double"] < -1e6  # logits: the top class always attached
    assert prop["scaling-filter"]["int"] == 1  # bilinear: nearest measured 4.4 points worse
    assert prop["net-scale-factor"]["double"] == pytest.approx(1 / (255 * 0.3081), rel=1e-12)
    assert prop["offsets"]["doubles"] == pytest.approx([255 * 0.1307] * 3, rel=1e-12)
    classes = json.loads(Path(f"{tiny_onnx}.json").read_text())["classes"]
    assert (out / prop["labelfile-path"]["value"]).read_text() == ";".join(classes) + "\n"
    app = glib_keyfile(out / APP)
    assert (out / app["primary-gie"]["config-file"]["value"]).is_file()
    assert app["source0"]["type"]["int"] == 3 and app["source0"]["uri"]["value"].startswith("file://")
    assert app["primary-gie"]["batch-size"]["int"] == app["streammux"]["batch-size"]["int"] == 1
    again = cli("export-deepstream", tiny_onnx, "--out", out, check=False)
    assert again.returncode == 1 and "already exists" in again.stderr


def _real_images(n: int = 40) -> np.ndarray:
    """Real digits at another size than the model's, resized by the runtime: what nvinfer's scaler hands on."""
    from PIL import Image

    from mlit_edge.train.data import load_dataset

    hwc = load_dataset("mnist5k", "test").hwc(slice(0, 1000, 1000 // n))
    return resize_images([np.asarray(Image.fromarray(img).resize((53, 47), Image.BILINEAR)) for img in hwc], 36)


@pytest.mark.parametrize("convention", ["normalised", PIXELS])
def test_nvinfer_preprocessing_reproduces_the_runtime_input_to_1e_6(convention, tiny_onnx, pixels_onnx, tmp_path):
    from mlit_edge.runtime import Classifier

    art = pixels_onnx if convention == PIXELS else tiny_onnx
    prop = glib_keyfile(write_deepstream(art, tmp_path / "ds") / CONFIG)["property"]
    scale, offsets = prop["net-scale-factor"]["double"], np.asarray(prop["offsets"]["doubles"])
    x = _real_images()  # uint8 (N, 36, 36, 3): nvinfer's x, "an int8 with range [0, 255]"
    y = (scale * (x.astype(np.float64) - offsets)).transpose(0, 3, 1, 2)  # y = net-scale-factor * (x - mean)
    with Classifier.load(art) as clf:
        want = clf.preprocess(list(x))
        assert clf.convention == convention
    assert want.dtype == np.float32 and np.abs(y - want).max() <= 1e-6
    assert np.array_equal(want, model_input(x, convention, [0.1307] * 3, [0.3081] * 3))


def test_a_per_channel_std_is_refused_with_the_raw_input_export_that_fixes_it(tiny_onnx, tmp_path):
    art = resigned_copy(tiny_onnx, tmp_path / "a" / "m.onnx",
                preprocess={"size": 36, "mean": [0.485, 0.456, 0.406], "std": [0.229, 0.224, 0.225]})
    r = cli("export-deepstream", art, "--out", tmp_path / "ds", check=False)
    assert r.returncode == 1 and len(r.stderr.strip().splitlines()) == 1
    assert "one net-scale-factor" in r.stderr and "--raw-input" in r.stderr and "0.229, 0.224, 0.225" in r.stderr
    assert not (tmp_path / "ds").exists()


def test_a_plan_names_its_engine_and_its_batch_and_bad_artifacts_are_one_line(tiny_onnx, tmp_path):
    io = {"inputs": [{"name": "images", "dtype": "float", "shape": [-1, 3, 36, 36]}],
          "outputs": [{"name": "logits", "dtype": "float", "shape": [-1, 10]}]}
    plan = fake_plan(tmp_path, io)
    prop = glib_keyfile(write_deepstream(plan, tmp_path / "ds") / CONFIG)["property"]
    assert prop["model-engine-file"]["value"] == "fake.plan" and "onnx-file" not in prop
    assert prop["network-mode"]["int"] == 2 and prop["batch-size"]["int"] == 16  # fp16; the profile's max
    assert prop["net-scale-factor"]["double"] == pytest.approx(1 / (255 * 0.5))
    for fields, words in [({"classes": ["a;b"] + [str(i) for i in range(9)]}, "holds ';'"),
                          ({"runtime": "onnxruntime"}, "onnxruntime"),
                          ({"input": {"name": "pixels", "convention": "pixels"}}, "does not belong to this graph")]:
        art = resigned_copy(tiny_onnx, tmp_path / words[:4].strip() / "m.onnx", **fields)
        r = cli("export-deepstream", art, "--out", tmp_path / "out", check=False)
        assert r.returncode == 1 and words in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
        assert not (tmp_path / "out").exists()
