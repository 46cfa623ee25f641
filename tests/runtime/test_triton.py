"""`mlit-edge export-triton`: a Triton model repository whose config.pbtxt parses with Triton's own model-config
protobuf (from tritonclient) and agrees with the artifact's sidecar and graph."""
import json
from pathlib import Path

import pytest

pytest.importorskip("onnx")
pytest.importorskip("tritonclient")
text_format = pytest.importorskip("google.protobuf.text_format")

from mlit_edge.artifacts.sidecar import read_sidecar  # noqa: E402
from mlit_edge.stacks.triton_config import PARAMETER  # noqa: E402
from tests.helpers import run_cli, tiny_model, fake_plan, model_config_pb2  # noqa: E402


def parse(folder: Path):
    pb2 = model_config_pb2()
    return text_format.Parse((folder / "config.pbtxt").read_text(), pb2.ModelConfig()), pb2


@pytest.fixture(scope="module")
def tiny(tiny_onnx) -> Path:
    return tiny_onnx


def test_onnx_artifact_becomes_a_dynamic_batch_onnxruntime_model(tiny, tmp_path):
    folder = Path(run_cli("export-triton", tiny, "--repo", tmp_path / "repo").stdout.strip())
    assert folder == tmp_path / "repo" / "mlit-tiny-fp32"
    cfg, pb2 = parse(folder)
    record = read_sidecar(tiny)
    assert cfg.name == "mlit-tiny-fp32" and cfg.platform == "onnxruntime_onnx"
    assert cfg.max_batch_size == 64 and cfg.HasField("dynamic_batching")
    assert [i.name for i in cfg.input] == list(record["inputs"]) and [o.name for o in cfg.output] == record["outputs"]
    assert cfg.input[0].data_type == pb2.TYPE_FP32 and list(cfg.input[0].dims) == record["inputs"]["images"][1:]
    assert cfg.output[0].data_type == pb2.TYPE_FP32 and list(cfg.output[0].dims) == [len(record["classes"])]
    assert (folder / "1" / "model.onnx").read_bytes() == tiny.read_bytes()
    assert json.loads((folder / "mlit-edge.json").read_text())["sha256"] == record["sha256"]


def test_static_batch_has_max_batch_zero_and_full_dims(tmp_path):
    from mlit_edge.export.onnx_export import export_onnx
    from mlit_edge.export.source import load_for_export

    static = tmp_path / "mlit-tiny-b4-fp32.onnx"
    _, info = load_for_export(None, "xxs", 10, random_weights=True)
    export_onnx(tiny_model(), static, info, batch=4)
    cfg, pb2 = parse(Path(run_cli("export-triton", static, "--repo", tmp_path / "repo", "--name", "b4").stdout.strip()))
    assert cfg.max_batch_size == 0 and not cfg.HasField("dynamic_batching")
    assert list(cfg.input[0].dims) == [4, 3, 36, 36] and list(cfg.output[0].dims) == [4, 10]
    # no FORMAT_NCHW on 4 dims: Triton refuses an image format without 3 ("model input NHWC/NCHW require 3 dims",
    # triton-inference-server/core src/model_config_utils.cc, r25.12); the dynamic batch's 3 dims keep it
    assert cfg.input[0].format == pb2.ModelInput.FORMAT_NONE


def test_plan_becomes_a_tensorrt_model_with_its_profile_as_max_batch(tiny, tmp_path, monkeypatch):
    """A plan built by JetPack 6.2's TensorRT (its stand-in: tests/standins) becomes a tensorrt_plan model; a
    TensorRT-RTX plan would be refused, since Triton's TensorRT backend links TensorRT."""
    from mlit_edge.engine.build import BuildRequest, run_build
    from tests.standins import install

    install(monkeypatch, "jetpack-6.2")
    plan = run_build(BuildRequest(onnx=str(tiny), precision="fp32", target="tensorrt", out=str(tmp_path / "out"),
                                  dynamic_batch=(1, 4, 16))).artifact
    monkeypatch.undo()  # export-triton runs as a workstation would, without the stand-ins
    cfg, pb2 = parse(Path(run_cli("export-triton", plan, "--repo", tmp_path / "repo").stdout.strip()))
    io = read_sidecar(plan)["engine"]["io"]
    assert cfg.platform == "tensorrt_plan" and cfg.max_batch_size == 16 and cfg.HasField("dynamic_batching")
    assert [(i.name, list(i.dims)) for i in cfg.input] == [(t["name"], t["shape"][1:]) for t in io["inputs"]]
    assert [o.name for o in cfg.output] == [t["name"] for t in io["outputs"]]
    assert cfg.instance_group[0].kind == pb2.ModelInstanceGroup.KIND_GPU


def test_refusals_are_one_line(tiny, tmp_path):
    repo = tmp_path / "repo"
    run_cli("export-triton", tiny, "--repo", repo)
    again = run_cli("export-triton", tiny, "--repo", repo, check=False)
    assert again.returncode != 0 and "already exists" in again.stderr and len(again.stderr.strip().splitlines()) == 1
    bad = run_cli("export-triton", tiny, "--repo", repo, "--name", "a/b", check=False)
    assert bad.returncode != 0 and "Triton's model names" in bad.stderr
    changed = tmp_path / "changed.onnx"
    changed.write_bytes(tiny.read_bytes() + b"x")
    (tmp_path / "changed.onnx.json").write_text((tiny.parent / "mlit-tiny-fp32.onnx.json").read_text())
    refused = run_cli("export-triton", changed, "--repo", repo, check=False)
    assert refused.returncode != 0 and "does not match its sidecar" in refused.stderr
    assert sorted(p.name for p in repo.iterdir()) == ["mlit-tiny-fp32"]  # nothing half-written


# a name that closes its string, its tensor and the input list, then opens a parameters block and a second input
INJECTED = 'images" data_type: TYPE_FP32 dims: [ 1 ] } ] parameters { key: "k" value { string_value: "v" } } ' \
           'input [ { name: "x'
ODD = 'logits\\"\n\t\x1b]0;t\x07 é ∑'  # a backslash, a quote, control bytes and non-ASCII: escaped, not refused


def named_onnx(folder: Path, inputs: str = "images", output: str = "logits", in_dims=("N", 3, 36, 36),
               out_dims=("N", 10)) -> Path:
    """A one-MatMul classifier with the given tensor names and graph dims, and its sidecar."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    from mlit_edge.artifacts.sidecar import write_sidecar

    graph = helper.make_graph([helper.make_node("Flatten", [inputs], ["flat"]),
                               helper.make_node("MatMul", ["flat", "w"], [output])], "g",
                              [helper.make_tensor_value_info(inputs, TensorProto.FLOAT, list(in_dims))],
                              [helper.make_tensor_value_info(output, TensorProto.FLOAT, list(out_dims))],
                              [numpy_helper.from_array(np.zeros((3 * 36 * 36, 10), np.float32), "w")])
    path = folder / "named.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]), path)
    write_sidecar(path, {"precision": "fp32", "classes": [str(i) for i in range(10)],
                         "preprocess": {"size": 36, "mean": [0.5] * 3, "std": [0.5] * 3, "dataset": "mnist5k"}})
    return path


def plan_io(inputs="images", output="logits", in_shape=(-1, 3, 36, 36), out_shape=(-1, 10)) -> dict:
    def shape(s):
        return list(s) if isinstance(s, tuple) else s  # anything else as given: a sidecar can say anything

    return {"inputs": [{"name": inputs, "dtype": "float", "shape": shape(in_shape)}],
            "outputs": [{"name": output, "dtype": "float", "shape": shape(out_shape)}]}


@pytest.mark.parametrize("kind", ["onnx", "plan"])
def test_hostile_tensor_names_are_escaped_and_parse_back_as_one_input(kind, tmp_path):
    """A name holding '"' and '}' used to add an input and a parameters block that Triton's parser accepts."""
    art = (named_onnx(tmp_path, INJECTED, ODD) if kind == "onnx" else fake_plan(tmp_path, plan_io(INJECTED, ODD)))
    cfg, pb2 = parse(Path(run_cli("export-triton", art, "--repo", tmp_path / "repo").stdout.strip()))
    assert [i.name for i in cfg.input] == [INJECTED] and [o.name for o in cfg.output] == [ODD]
    # the one parameter is ours (what the input takes): the injected block would have added another
    assert list(cfg.parameters) == [PARAMETER] and cfg.parameters[PARAMETER].string_value.startswith("normalised:")
    assert list(cfg.input[0].dims) == [3, 36, 36] and list(cfg.output[0].dims) == [10]
    assert cfg.input[0].data_type == pb2.TYPE_FP32 and cfg.max_batch_size == (64 if kind == "onnx" else 16)


def refused(args, tmp_path, words: str) -> None:
    repo = tmp_path / "repo"
    proc = run_cli("export-triton", *args, "--repo", repo, check=False)
    assert proc.returncode == 1 and words in proc.stderr, proc.stderr[-1500:]
    assert len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr
    assert not repo.exists() or not list(repo.iterdir())  # no model folder, no staging left


@pytest.mark.parametrize("io, words", [
    (plan_io(in_shape=(-1, 3, 10 ** 30, 36)), "engine.io.inputs[0].shape is [-1, 3, 1000000000000000000000000000000"),
    (plan_io(out_shape=(-1, -7)), "engine.io.outputs[0].shape is [-1, -7]"),
    (plan_io(out_shape=(-1, 0)), "engine.io.outputs[0].shape is [-1, 0]"),
    ({"inputs": plan_io()["inputs"], "outputs": []}, "records no outputs"),
    ({"inputs": plan_io()["inputs"]}, "engine.io.outputs is missing"),
    ({**plan_io(), "inputs": "images"}, "engine.io.inputs is 'images'"),
    ({**plan_io(), "inputs": ["images"]}, "engine.io.inputs[0] is 'images'"),
    (plan_io(inputs=5), "engine.io.inputs[0].name is 5"),
    (plan_io(in_shape="3x36x36"), "engine.io.inputs[0].shape is '3x36x36'"),
    (plan_io(in_shape=(-1, "3", 36, 36)), "engine.io.inputs[0].shape is [-1, '3', 36, 36]"),
    (plan_io(in_shape=(-1, 3.5, 36, 36)), "engine.io.inputs[0].shape is [-1, 3.5, 36, 36]"),
    (plan_io(in_shape=(-1, True, 36, 36)), "engine.io.inputs[0].shape is [-1, True, 36, 36]"),
    ({**plan_io(), "outputs": [{"name": "logits", "dtype": 3, "shape": [-1, 10]}]}, "engine.io.outputs[0].dtype is 3"),
    (plan_io(inputs=""), "engine.io.inputs[0].name is ''"),
])
def test_a_plan_sidecar_s_io_of_the_wrong_shape_or_type_is_one_line_naming_the_field(io, words, tmp_path):
    refused([fake_plan(tmp_path, io)], tmp_path, words)


def test_an_engine_io_that_is_not_an_object_is_named(tmp_path):
    refused([fake_plan(tmp_path, ["images", "logits"])], tmp_path, "engine.io is ['images', 'logits']")


@pytest.mark.parametrize("dims, words", [((-1, 3, -5, 36), "dimension -5"), ((0, 3, 36, 36), "dimension 0")])
def test_onnx_dims_that_are_negative_or_zero_are_refused(dims, words, tmp_path):
    refused([named_onnx(tmp_path, in_dims=dims)], tmp_path, words)


@pytest.mark.parametrize("name, words", [("", "--name is empty"), ("a" * 200, "--name is 200 characters long"),
                                         ('a" platform: "x', "Triton's model names"), ("a\nb", "Triton's model names")])
def test_model_names_are_refused_not_replaced(tiny, tmp_path, name, words):
    refused([tiny, "--name", name], tmp_path, words)


def test_a_long_artifact_name_says_the_length_is_the_problem(tiny, tmp_path):
    import shutil

    long = tmp_path / ("m" * 140 + ".onnx")
    shutil.copyfile(tiny, long)
    shutil.copyfile(f"{tiny}.json", f"{long}.json")
    refused([long], tmp_path, "is 140 characters long")


def test_a_config_that_does_not_parse_as_meant_is_never_written(tmp_path, monkeypatch):
    """The escaping undone: the parse-back finds the injected input, and nothing is published."""
    from mlit_edge.stacks import triton_config
    from mlit_edge.stacks.triton import write_repository

    monkeypatch.setattr(triton_config, "quote", lambda text: f'"{text}"')
    art = named_onnx(tmp_path, INJECTED)
    with pytest.raises(ValueError, match="does not parse back as the config meant"):
        write_repository(art, tmp_path / "repo")
    monkeypatch.setattr(triton_config, "quote", lambda text: f'"{text}')  # one that does not parse at all
    with pytest.raises(ValueError, match="does not parse"):
        write_repository(named_onnx(tmp_path), tmp_path / "repo")
    assert not (tmp_path / "repo").exists()  # checked before the repository is touched


def test_a_planted_staging_link_or_folder_is_never_followed_nor_deleted(tiny, tmp_path):
    repo, elsewhere = tmp_path / "repo", tmp_path / "elsewhere"
    repo.mkdir()
    elsewhere.mkdir()
    (elsewhere / "theirs.txt").write_text("keep")
    (repo / ".a.partial").symlink_to(elsewhere, target_is_directory=True)
    (repo / ".b.partial").mkdir()
    (repo / ".b.partial" / "someone.txt").write_text("keep too")
    for name in ("a", "b"):
        folder = Path(run_cli("export-triton", tiny, "--repo", repo, "--name", name).stdout.strip())
        assert folder == repo / name and folder.is_dir() and not folder.is_symlink()
        assert (folder / "1" / "model.onnx").read_bytes() == tiny.read_bytes() and parse(folder)[0].name == name
    assert sorted(p.name for p in elsewhere.iterdir()) == ["theirs.txt"]
    assert (elsewhere / "theirs.txt").read_text() == "keep"
    assert (repo / ".a.partial").is_symlink() and (repo / ".b.partial" / "someone.txt").read_text() == "keep too"
    assert sorted(p.name for p in repo.iterdir()) == [".a.partial", ".b.partial", "a", "b"]  # no staging left
    (repo / "c").symlink_to(tmp_path / "nowhere")  # a dangling link where the model folder goes
    proc = run_cli("export-triton", tiny, "--repo", repo, "--name", "c", check=False)
    assert proc.returncode == 1 and "already exists" in proc.stderr and not (tmp_path / "nowhere").exists()


def test_without_tritonclient_the_config_is_not_written_and_the_error_says_what_to_install(tiny, tmp_path, monkeypatch):
    import sys

    from mlit_edge.stacks import triton_config
    from mlit_edge.stacks.triton import write_repository

    triton_config.model_config_pb2.cache_clear()
    monkeypatch.setitem(sys.modules, "tritonclient", None)  # `import tritonclient` raises ImportError
    try:
        with pytest.raises(RuntimeError, match=r"pip install 'mlit-edge\[triton\]'"):
            write_repository(tiny, tmp_path / "repo")
    finally:
        triton_config.model_config_pb2.cache_clear()
    assert not (tmp_path / "repo").exists()


def external_onnx(folder: Path, location=None) -> Path:
    """`named_onnx` saved with its weight in external data (x.data beside it); `location`: the one recorded."""
    import onnx

    from mlit_edge.artifacts.sidecar import write_sidecar

    path = named_onnx(folder)
    model = onnx.load(str(path))
    onnx.save_model(model, str(path), save_as_external_data=True, location="x.data", size_threshold=0)
    if location is not None:  # rewritten in the graph, the data file left where it is
        model = onnx.load(str(path), load_external_data=False)
        [e for e in model.graph.initializer[0].external_data if e.key == "location"][0].value = location
        onnx.save(model, str(path))
    write_sidecar(path, json.loads(Path(f"{path}.json").read_text()))
    return path


def test_an_onnx_with_external_data_is_published_with_its_data_file(tmp_path):
    import numpy as np
    import onnx
    from onnx import numpy_helper

    art = external_onnx(tmp_path)
    folder = Path(run_cli("export-triton", art, "--repo", tmp_path / "repo").stdout.strip())
    assert sorted(p.name for p in (folder / "1").iterdir()) == ["model.onnx", "x.data"] and not (folder / "x.data").exists()
    weight = numpy_helper.to_array(onnx.load(str(folder / "1" / "model.onnx")).graph.initializer[0])
    assert weight.shape == (3 * 36 * 36, 10) and not np.any(weight)
    assert parse(folder)[0].name == "named"


@pytest.mark.parametrize("location, words", [("../../etc/passwd", "not a file name beside it"),
                                             ("/etc/passwd", "not a file name beside it"),
                                             ("model.onnx", "not a file name beside it"),
                                             ("gone.data", "which is not beside it")])
def test_an_external_data_location_outside_its_folder_or_missing_is_refused(location, words, tmp_path):
    refused([external_onnx(tmp_path, location)], tmp_path, words)


def test_external_data_linked_out_of_its_folder_is_refused(tmp_path):
    (tmp_path / "art").mkdir()
    art, data = external_onnx(tmp_path / "art"), tmp_path / "art" / "x.data"
    data.rename(tmp_path / "secret")
    data.symlink_to(tmp_path / "secret")
    refused([art], tmp_path, "a link out of its folder")


def test_an_ort_artifact_warns_which_onnxruntime_triton_must_ship_and_a_portable_one_does_not(tiny, tmp_path):
    from mlit_edge.artifacts.sidecar import write_sidecar

    art = named_onnx(tmp_path)
    write_sidecar(art, {**json.loads(Path(f"{art}.json").read_text()), "runtime": "onnxruntime",
                        "onnxruntime": {"session": {}, "requires": "1.23"}})
    # made for ONNX Runtime's own kernels: not for the GPU default's TensorRT accelerator (test_triton_gpu.py)
    gpu = run_cli("export-triton", art, "--repo", tmp_path / "repo", check=False)
    assert gpu.returncode == 1 and "pass --kind cpu" in gpu.stderr and len(gpu.stderr.strip().splitlines()) == 1
    proc = run_cli("export-triton", art, "--repo", tmp_path / "repo", "--kind", "cpu")
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "ONNX Runtime 1.23" in lines[0] and lines[0].startswith("warning:")
    assert "check that your Triton release's ONNX Runtime backend is >= 1.23" in lines[0]
    folder = Path(proc.stdout.strip())
    assert "# this model needs ONNX Runtime 1.23" in (folder / "config.pbtxt").read_text()
    assert parse(folder)[0].name == "named" and list(parse(folder)[0].parameters) == [PARAMETER]
    portable = run_cli("export-triton", tiny, "--repo", tmp_path / "repo")
    assert "warning" not in portable.stderr and "#" not in (Path(portable.stdout.strip()) / "config.pbtxt").read_text()
