"""`--raw-input`: the normalisation folded into the patch embedding (exact), the sidecar's input convention, and
every consumer (runtime, bench, Triton) feeding each convention its own input."""
import json

import numpy as np
import pytest
import torch

from mlit_edge.export.raw_input import fold_normalisation
from mlit_edge.artifacts.input_convention import NORMALISED, PIXELS, from_normalised
from mlit_edge.artifacts.schema import recorded
from mlit_edge.runtime.runners import OnnxRuntimeRunner, predict_all
from mlit_edge.artifacts.schema import SidecarError
from mlit_edge.artifacts.sidecar import read_sidecar
from tests.helpers import export_tiny, refused_everywhere, resigned_copy, run_cli

IMAGENET = ((0.485, 0.456, 0.406), (0.229, 0.224, 0.225))


@pytest.mark.parametrize("mean,std", [((0.1307,) * 3, (0.3081,) * 3), IMAGENET])
def test_the_fold_is_the_normalised_convolution_on_pixels(mean, std):
    torch.manual_seed(0)
    conv = torch.nn.Conv2d(3, 16, 3, stride=3, bias=False).double()
    pixels = torch.randint(0, 256, (4, 3, 36, 36)).double()
    m, s = torch.tensor(mean).double().view(1, 3, 1, 1), torch.tensor(std).double().view(1, 3, 1, 1)
    want = conv((pixels / 255 - m) / s)
    folded = fold_normalisation(conv.float(), mean, std).double()
    got = folded(pixels)
    # float32 weights: the rounding of W / (255 s), not the algebra, is all that separates the two
    assert (got - want).abs().max().item() < 1e-5 * want.abs().max().item()
    assert conv.bias is None and folded.bias is not None  # the original is untouched


def test_a_padded_patch_embedding_is_refused_since_its_border_would_differ():
    with pytest.raises(ValueError, match="padded"):
        fold_normalisation(torch.nn.Conv2d(3, 8, 3, stride=3, padding=1, bias=False), (0.5,) * 3, (0.25,) * 3)


@pytest.fixture(scope="module")
def both(tmp_path_factory):
    """The tiny model exported both ways, with its routing outputs."""
    folder = tmp_path_factory.mktemp("raw")
    for sub in ("normalised", "pixels"):
        (folder / sub).mkdir()
    return (export_tiny(folder / "normalised" / "mlit-tiny-fp32.onnx", probe=True),
            export_tiny(folder / "pixels" / "mlit-tiny-fp32.onnx", convention=PIXELS, probe=True))


def _digits(n: int = 200):
    from mlit_edge.train.data import load_dataset

    ds = load_dataset("mnist5k", "test")
    return ds.hwc(slice(0, n)), ds.inputs(slice(0, n)), ds


def test_the_pixels_graph_matches_the_normalised_one_on_real_images_with_the_same_experts(both):
    normalised, pixels = both
    hwc, x, ds = _digits()
    with OnnxRuntimeRunner(normalised, expose_routing=True) as a, OnnxRuntimeRunner(pixels, expose_routing=True) as b:
        assert (a.input_name, b.input_name) == ("images", "pixels")
        want, want_routes = predict_all(a, x, routes=True)
        got, got_routes = predict_all(b, np.ascontiguousarray(hwc.astype(np.float32).transpose(0, 3, 1, 2)),
                                      routes=True)
        again, _ = predict_all(b, x, routes=True, normalised=(ds.mean, ds.std))  # a data set's images, given back
    assert np.abs(got - want).max() < 1e-5
    # a random model's gate logits tie on the digits' blank patches: the shipped model's test below is exact
    assert len(got_routes) == 3 and all((p == q).all(-1).mean() > 0.999 for p, q in zip(got_routes, want_routes))
    assert np.array_equal(again, got)  # the normalised images come back as their exact pixels
    rec = read_sidecar(pixels)
    assert rec["input"]["convention"] == PIXELS and rec["input"]["range"] == [0.0, 255.0]
    assert recorded(normalised).input_convention == NORMALISED
    assert rec["parity"]["max_abs_err"] < 1e-5  # the export's own check against PyTorch fed the same pixels


@pytest.mark.slow  # the real model exported three times: a real-size export
def test_the_shipped_model_takes_pixels_exactly_with_the_same_experts_in_every_layer(tmp_path):
    """The issue's check on the real model, on a quarter of the test split (the issue measured all 1000 images;
    docs/export-and-build.md has that figure): logits within 1e-5, experts equal in every layer."""
    from mlit_edge.export.onnx_export import export_onnx
    from mlit_edge.export.source import load_for_export

    model, info = load_for_export("pretrained:xxs-mnist5k", None)
    import onnx

    from mlit_edge.export.uint8_input import take_uint8

    paths = [tmp_path / f"{c}.onnx" for c in (NORMALISED, PIXELS, "uint8")]
    for path, convention in zip(paths, (NORMALISED, PIXELS)):
        export_onnx(model, path, info, probe=True, check=False, convention=convention)
    onnx.save(take_uint8(onnx.load(str(paths[1]))), str(paths[2]))  # what --input-dtype uint8 exports
    hwc, x, ds = _digits(250)
    chw = np.ascontiguousarray(hwc.transpose(0, 3, 1, 2))
    with OnnxRuntimeRunner(paths[0], expose_routing=True) as a, OnnxRuntimeRunner(paths[1], expose_routing=True) as b, \
            OnnxRuntimeRunner(paths[2], expose_routing=True) as c:
        want, want_routes = predict_all(a, x, routes=True)
        got, got_routes = predict_all(b, chw.astype(np.float32), routes=True)
        u8, u8_routes = predict_all(c, chw, routes=True)  # --input-dtype uint8: the same pixels, a Cast inside
    assert np.abs(got - want).max() < 1e-5
    assert len(got_routes) == model.cfg.depth and all(np.array_equal(p, q) for p, q in zip(got_routes, want_routes))
    assert (got.argmax(-1) == ds.labels[:250].numpy()).mean() > 0.97
    assert np.array_equal(u8, got) and all(np.array_equal(p, q) for p, q in zip(u8_routes, got_routes))


def test_predict_gives_the_same_classes_under_both_conventions(both, tmp_path):
    from PIL import Image

    from mlit_edge.runtime import Classifier

    hwc, _, _ = _digits(6)
    files = []
    for i, img in enumerate(hwc):
        files.append(tmp_path / f"{i}.png")
        Image.fromarray(img).resize((50, 41)).save(files[-1])  # resized by the runtime, as a user's photo is
    with Classifier.load(both[0]) as a, Classifier.load(both[1]) as b:
        pa, pb = a.predict(files), b.predict(files)
        assert b.preprocess(files).max() > 1.5  # pixels, not normalised values
    assert [p.class_id for p in pa] == [p.class_id for p in pb]
    assert max(abs(p.prob - q.prob) for p, q in zip(pa, pb)) < 1e-5
    out = run_cli("predict", *files, "--model", both[1]).stdout
    assert out.count("\n") == len(files) and all(f"{f}:" in out for f in files)


def test_a_sidecar_that_contradicts_its_graph_is_refused_everywhere(both, tmp_path):
    from mlit_edge.runtime import Classifier
    from mlit_edge.artifacts.input_convention import input_record

    said_pixels = resigned_copy(both[0], tmp_path / "a" / "m.onnx", input=input_record(PIXELS, [0.1307] * 3, [0.3081] * 3))
    said_normal = resigned_copy(both[1], tmp_path / "b" / "m.onnx",
                            input=input_record(NORMALISED, [0.1307] * 3, [0.3081] * 3))
    for art in (said_pixels, said_normal):
        refused_everywhere(art, tmp_path / f"repo-{art.parent.name}", "does not belong to this graph")
    forged = resigned_copy(both[1], tmp_path / "c" / "m.onnx", input={"convention": "pixels", "name": "images"})
    with pytest.raises(SidecarError, match="input.name"):
        Classifier.load(forged)


def test_bench_feeds_each_convention_its_own_input(both, tmp_path):
    out = tmp_path / "bench.json"
    run_cli("bench", *both, "--iterations", "2", "--batch", "1", "--limit", "64", "--in-process", "--json", out)
    rows = json.loads(out.read_text())["artifacts"]
    a, b = (r["accuracy"] for r in rows)
    assert a["images"] == b["images"] == 64 and a["top1"] == b["top1"]


def test_from_normalised_inverts_the_normalisation():
    rng = np.random.default_rng(0)
    hwc = rng.integers(0, 256, (3, 36, 36, 3), dtype=np.uint8)
    from mlit_edge.artifacts.preprocess import normalize

    x = normalize(hwc, *IMAGENET)
    back = from_normalised(x, PIXELS, *IMAGENET, from_uint8=True)
    assert np.array_equal(back, hwc.transpose(0, 3, 1, 2).astype(np.float32))
    assert from_normalised(x, NORMALISED, *IMAGENET) is x


def test_raw_input_with_a_given_onnx_is_refused_in_one_line(both):
    r = run_cli("build", "--onnx", both[0], "--raw-input", "--target", "onnxruntime", check=False)
    assert r.returncode != 0 and "--raw-input shapes an export from a checkpoint" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
    r = run_cli("build", "--raw-input", "--frontend", "torch-tensorrt", "--random-weights", check=False)
    assert r.returncode != 0 and "--frontend onnx" in r.stderr


def test_triton_config_says_what_each_input_takes(both, tmp_path):
    pytest.importorskip("tritonclient")
    from google.protobuf import text_format

    from mlit_edge.stacks.triton import write_repository
    from mlit_edge.stacks.triton_config import PARAMETER, model_config_pb2

    pb2 = model_config_pb2()
    for art, want in zip(both, ("normalised: RGB (pixel / 255 - mean) / std", "pixels: RGB 0-255")):
        folder = write_repository(art, tmp_path / "repo", f"m-{art.parent.name}")
        cfg = text_format.Parse((folder / "config.pbtxt").read_text(), pb2.ModelConfig())
        assert cfg.parameters[PARAMETER].string_value.startswith(want)
        assert cfg.input[0].name == art.parent.name.replace("normalised", "images")
        assert cfg.input[0].format == pb2.ModelInput.Format.Value("FORMAT_NCHW")
