"""`--input-dtype uint8`: the pixels graph behind one Cast, exact against the float32 pixels graph, fed uint8 by
every consumer (runtime, bench, calibration, Triton), refused by DeepStream, and built by TensorRT-RTX."""
import json

import numpy as np
import pytest

from mlit_edge.export.uint8_input import CAST_NAME, take_uint8
from mlit_edge.artifacts.input_convention import NORMALISED, PIXELS, UINT8, input_record
from mlit_edge.artifacts.schema import recorded
from mlit_edge.runtime.runners import OnnxRuntimeRunner, predict_all
from mlit_edge.artifacts.schema import SidecarError
from mlit_edge.artifacts.sidecar import read_sidecar
from tests.helpers import export_tiny, refused_everywhere, resigned_copy, run_cli

MNIST = ([0.1307] * 3, [0.3081] * 3)


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    """The tiny model's pixels graph, float32 and uint8, each in its own folder."""
    folder = tmp_path_factory.mktemp("u8")
    for sub in ("f32", "u8"):
        (folder / sub).mkdir()
    return (export_tiny(folder / "f32" / "mlit-tiny-fp32.onnx", convention=PIXELS, probe=True),
            export_tiny(folder / "u8" / "mlit-tiny-fp32.onnx", convention=PIXELS, probe=True, input_dtype=UINT8))


def _digits(n: int = 200):
    from mlit_edge.train.data import load_dataset

    ds = load_dataset("mnist5k", "test")
    return ds.hwc(slice(0, n)), ds.inputs(slice(0, n)), ds


def test_the_uint8_graph_is_the_float_graph_behind_one_cast_and_computes_the_same(pair):
    import onnx

    f32, u8 = pair
    graph = onnx.load(str(u8)).graph
    first = graph.node[0]
    assert graph.input[0].name == "pixels" and graph.input[0].type.tensor_type.elem_type == onnx.TensorProto.UINT8
    assert (first.op_type, first.name, first.input[0]) == ("Cast", CAST_NAME, "pixels")
    assert [a.i for a in first.attribute if a.name == "to"] == [onnx.TensorProto.FLOAT]
    assert sum(n.op_type == "Cast" for n in graph.node) == sum(n.op_type == "Cast" for n in onnx.load(str(f32)).graph.node) + 1
    hwc, x, ds = _digits()
    chw = np.ascontiguousarray(hwc.transpose(0, 3, 1, 2))
    with OnnxRuntimeRunner(f32, expose_routing=True) as a, OnnxRuntimeRunner(u8, expose_routing=True) as b:
        assert (a.input_dtype, b.input_dtype) == ("float32", "uint8")
        want, want_routes = predict_all(a, chw.astype(np.float32), routes=True)
        got, got_routes = predict_all(b, chw, routes=True)
        again, _ = predict_all(b, x, routes=True, normalised=(ds.mean, ds.std))  # a data set's, given back as uint8
    # a Cast of whole numbers is exact: the same numbers reach the same ops
    assert np.array_equal(got, want) and all(np.array_equal(p, q) for p, q in zip(got_routes, want_routes))
    assert np.array_equal(again, got)
    rec = read_sidecar(u8)
    assert rec["input"]["dtype"] == UINT8 and rec["input"]["convention"] == PIXELS
    assert recorded(f32).input_dtype == "float32"
    assert rec["parity"]["max_abs_err"] < 1e-5  # the export's check fed it whole pixels, PyTorch their normalised form


def test_take_uint8_refuses_what_it_cannot_rewrite(pair):
    import onnx

    with pytest.raises(ValueError, match="not FLOAT"):
        take_uint8(onnx.load(str(pair[1])))  # already uint8
    with pytest.raises(ValueError, match="no input 'images'"):
        take_uint8(onnx.load(str(pair[0])), "images")


def test_uint8_is_for_pixels_only_in_the_record_the_request_and_the_cli():
    from mlit_edge.export.requests import ExportOptions
    from mlit_edge.artifacts.input_convention import check_input_field
    from mlit_edge.artifacts.schema import check_record

    with pytest.raises(ValueError, match="add --raw-input"):
        input_record(NORMALISED, *MNIST, dtype=UINT8)
    with pytest.raises(ValueError, match="add --raw-input"):
        ExportOptions(input_dtype=UINT8)
    with pytest.raises(ValueError, match="choose from float32, uint8"):
        ExportOptions(raw_input=True, input_dtype="float16")
    forged = {**input_record(NORMALISED, *MNIST), "dtype": UINT8}
    with pytest.raises(SidecarError, match="input.dtype"):
        check_record({"input": forged}, "m.onnx")
    check_input_field(input_record(PIXELS, *MNIST, dtype=UINT8), lambda *a: AssertionError(a))
    r = run_cli("export", "--random-weights", "--size", "xxs", "--input-dtype", "uint8", check=False)
    assert r.returncode != 0 and "add --raw-input" in r.stderr and len(r.stderr.strip().splitlines()) == 1


def test_the_classifier_feeds_uint8_and_gives_the_float_graphs_classes(pair, tmp_path):
    from PIL import Image

    from mlit_edge.runtime import Classifier
    from mlit_edge.runtime.images import InputError

    hwc, _, _ = _digits(6)
    files = []
    for i, img in enumerate(hwc):
        files.append(tmp_path / f"{i}.png")
        Image.fromarray(img).resize((50, 41)).save(files[-1])
    with Classifier.load(pair[0]) as a, Classifier.load(pair[1]) as b:
        pa, pb = a.predict(files), b.predict(files)
        x = b.preprocess(files)
        assert x.dtype == np.uint8 and x.shape == (6, 3, 36, 36)
        assert np.array_equal(x, a.preprocess(files).astype(np.uint8))  # the same resized pixels, a quarter the bytes
        with pytest.raises(InputError, match="expected uint8"):
            b.logits(x.astype(np.float32))
    assert [p.class_id for p in pa] == [p.class_id for p in pb] and [p.prob for p in pa] == [p.prob for p in pb]


def test_a_sidecar_whose_dtype_contradicts_its_graph_is_refused_everywhere(pair, tmp_path):
    said_float = resigned_copy(pair[1], tmp_path / "a" / "m.onnx", input=input_record(PIXELS, *MNIST))
    said_uint8 = resigned_copy(pair[0], tmp_path / "b" / "m.onnx", input=input_record(PIXELS, *MNIST, dtype=UINT8))
    for art in (said_float, said_uint8):
        refused_everywhere(art, tmp_path / f"repo-{art.parent.name}", "input dtype .* does not belong to this graph")


def test_bench_times_and_measures_a_uint8_graph_with_and_without_data(pair, tmp_path):
    from mlit_edge.bench.one_artifact import random_batch

    out = tmp_path / "bench.json"
    run_cli("bench", *pair, "--iterations", "2", "--batch", "1", "--limit", "64", "--in-process", "--json", out)
    a, b = (r["accuracy"] for r in json.loads(out.read_text())["artifacts"])
    assert a["images"] == b["images"] == 64 and a["top1"] == b["top1"]
    with OnnxRuntimeRunner(pair[1]) as run:
        x = random_batch(run, 2, np.random.default_rng(0))
        assert x.dtype == np.uint8 and run.infer({"pixels": x})["logits"].shape == (2, 10)


def test_triton_declares_a_uint8_input_and_deepstream_refuses_one(pair, tmp_path):
    pytest.importorskip("tritonclient")
    from google.protobuf import text_format

    from mlit_edge.stacks.deepstream import write_deepstream
    from mlit_edge.stacks.triton import write_repository
    from mlit_edge.stacks.triton_config import PARAMETER, model_config_pb2

    pb2 = model_config_pb2()
    folder = write_repository(pair[1], tmp_path / "repo", "m")
    cfg = text_format.Parse((folder / "config.pbtxt").read_text(), pb2.ModelConfig())
    assert cfg.input[0].name == "pixels" and cfg.input[0].data_type == pb2.DataType.Value("TYPE_UINT8")
    assert cfg.parameters[PARAMETER].string_value.startswith("pixels: RGB 0-255 as uint8")
    with pytest.raises(ValueError, match="nvinfer feeds float32.*--raw-input, and export-deepstream that"):
        write_deepstream(pair[1], tmp_path / "ds")
    assert not (tmp_path / "ds").exists()
    assert (write_deepstream(pair[0], tmp_path / "ds-f32") / "config_infer_mlit.txt").is_file()  # float32: served


@pytest.mark.slow  # two variants and three TensorRT-RTX builds: about 7 s
def test_fp16_and_int8_variants_take_uint8_and_tensorrt_rtx_builds_all_three(pair, tmp_path):
    """The variants of a uint8 graph keep its uint8 input (the fp16 converter leaves the Cast as it is; INT8 is
    calibrated on uint8 pixels), agree with the float32 pixels graph's variants, and TensorRT-RTX parses and
    builds each: the CI's check that the graph is TensorRT-buildable."""
    import onnx

    from mlit_edge.engine.check import check
    from mlit_edge.export.variants import variant_of

    hwc, x, ds = _digits(100)
    chw = np.ascontiguousarray(hwc.transpose(0, 3, 1, 2))
    for sub in ("u8", "f32"):
        (tmp_path / sub).mkdir()
    for precision in ("fp16", "int8"):
        u8 = variant_of(pair[1], precision, folder=tmp_path / "u8").path
        f32 = variant_of(pair[0], precision, folder=tmp_path / "f32").path
        assert onnx.load(str(u8)).graph.input[0].type.tensor_type.elem_type == onnx.TensorProto.UINT8
        assert read_sidecar(u8)["input"]["dtype"] == UINT8
        with OnnxRuntimeRunner(u8) as b, OnnxRuntimeRunner(f32) as a:
            got, want = predict_all(b, chw)[0], predict_all(a, chw.astype(np.float32))[0]
        assert (got.argmax(-1) == want.argmax(-1)).mean() >= 0.99 and np.abs(got - want).max() < 0.5
    pytest.importorskip("tensorrt_rtx")
    for art in (pair[1], tmp_path / "u8" / "mlit-tiny-fp16.onnx", tmp_path / "u8" / "mlit-tiny-int8.onnx"):
        rep = check(art)
        assert rep.ok and rep.build["ok"], (art.name, rep.problems, rep.build)
