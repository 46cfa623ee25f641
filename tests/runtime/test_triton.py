"""`mlit-edge export-triton`: a Triton model repository whose config.pbtxt parses with Triton's own model-config
protobuf (from tritonclient) and agrees with the artifact's sidecar and graph."""
import importlib.util
import json
from pathlib import Path

import pytest

pytest.importorskip("onnx")
tritonclient = pytest.importorskip("tritonclient")
text_format = pytest.importorskip("google.protobuf.text_format")

from mlit_edge.runtime.sidecar import read_sidecar  # noqa: E402
from mlit_edge.runtime.trt_env import import_trt  # noqa: E402
from tests.helpers import cli, tiny_model  # noqa: E402


def model_config_pb2():
    """Triton's ModelConfig message, loaded from tritonclient's generated module without its gRPC client."""
    path = Path(tritonclient.__file__).parent / "grpc" / "model_config_pb2.py"
    spec = importlib.util.spec_from_file_location("model_config_pb2", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def parse(folder: Path):
    pb2 = model_config_pb2()
    return text_format.Parse((folder / "config.pbtxt").read_text(), pb2.ModelConfig()), pb2


@pytest.fixture(scope="module")
def tiny(tiny_onnx) -> Path:
    return tiny_onnx


def test_onnx_artifact_becomes_a_dynamic_batch_onnxruntime_model(tiny, tmp_path):
    folder = Path(cli("export-triton", tiny, "--repo", tmp_path / "repo").stdout.strip())
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
    cfg, _ = parse(Path(cli("export-triton", static, "--repo", tmp_path / "repo", "--name", "b4").stdout.strip()))
    assert cfg.max_batch_size == 0 and not cfg.HasField("dynamic_batching")
    assert list(cfg.input[0].dims) == [4, 3, 36, 36] and list(cfg.output[0].dims) == [4, 10]


@pytest.mark.skipif(import_trt() is None, reason="needs tensorrt or tensorrt_rtx (the dev extra installs it)")
def test_plan_becomes_a_tensorrt_model_with_its_profile_as_max_batch(tiny, tmp_path):
    cli("build", "--onnx", tiny, "--precision", "fp32", "--target", "tensorrt-rtx", "--out", tmp_path / "out",
        "--dynamic-batch", "1,4,16", timeout=600)
    plan = tmp_path / "out" / "mlit-tiny-fp32.plan"
    cfg, pb2 = parse(Path(cli("export-triton", plan, "--repo", tmp_path / "repo").stdout.strip()))
    io = read_sidecar(plan)["engine"]["io"]
    assert cfg.platform == "tensorrt_plan" and cfg.max_batch_size == 16 and cfg.HasField("dynamic_batching")
    assert [(i.name, list(i.dims)) for i in cfg.input] == [(t["name"], t["shape"][1:]) for t in io["inputs"]]
    assert [o.name for o in cfg.output] == [t["name"] for t in io["outputs"]]
    assert cfg.instance_group[0].kind == pb2.ModelInstanceGroup.KIND_GPU


def test_refusals_are_one_line(tiny, tmp_path):
    repo = tmp_path / "repo"
    cli("export-triton", tiny, "--repo", repo)
    again = cli("export-triton", tiny, "--repo", repo, check=False)
    assert again.returncode != 0 and "already exists" in again.stderr and len(again.stderr.strip().splitlines()) == 1
    bad = cli("export-triton", tiny, "--repo", repo, "--name", "a/b", check=False)
    assert bad.returncode != 0 and "Triton's model names" in bad.stderr
    changed = tmp_path / "changed.onnx"
    changed.write_bytes(tiny.read_bytes() + b"x")
    (tmp_path / "changed.onnx.json").write_text((tiny.parent / "mlit-tiny-fp32.onnx.json").read_text())
    refused = cli("export-triton", changed, "--repo", repo, check=False)
    assert refused.returncode != 0 and "does not match its sidecar" in refused.stderr
    assert sorted(p.name for p in repo.iterdir()) == ["mlit-tiny-fp32"]  # nothing half-written
