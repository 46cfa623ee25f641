"""`mlit-edge export-triton --kind gpu|cpu` (issue 46, item 7 and item 1's Triton part): an ONNX on KIND_GPU with
ONNX Runtime's TensorRT accelerator, its precision_mode from the artifact (fp32, fp16 and TensorRT's INT8 Q/DQ
variants, made as `mlit-edge export` makes them), parsed back with Triton's own model-config protobuf (from
tritonclient); `--kind cpu` as the config was before; a plan on the GPU only; and `check_config`, Triton's documented
rules that its parser cannot see, refusing hand-made configs that break them. No GPU is needed: these are configs."""
from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

pytest.importorskip("onnx")
pytest.importorskip("tritonclient")
text_format = pytest.importorskip("google.protobuf.text_format")

from mlit_edge.artifacts.sidecar import read_sidecar  # noqa: E402
from mlit_edge.stacks.triton_config import Tensor  # noqa: E402
from mlit_edge.stacks.triton_rules import check_config  # noqa: E402
from tests.helpers import run_cli, export_tiny, fake_plan, model_config_pb2  # noqa: E402


PB2 = model_config_pb2()


def exported(art: Path, repo: Path, *more: str):
    """`export-triton ART --repo REPO MORE...`, its config.pbtxt parsed by Triton's ModelConfig."""
    folder = Path(run_cli("export-triton", art, "--repo", repo, *more).stdout.strip())
    return text_format.Parse((folder / "config.pbtxt").read_text(), PB2.ModelConfig())


def refused(args: list, repo: Path, *words: str) -> None:
    """`export-triton ARGS --repo REPO` exits 1 with one line holding each of `words`, and writes no model folder."""
    proc = run_cli("export-triton", *args, "--repo", repo, check=False)
    assert proc.returncode == 1 and all(w in proc.stderr for w in words), proc.stderr[-1500:]
    assert len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr
    assert not repo.exists() or not [p for p in repo.iterdir() if not p.name.startswith(".")]


def kind(cfg) -> list[str]:
    return [PB2.ModelInstanceGroup.Kind.Name(g.kind) for g in cfg.instance_group]


@pytest.fixture(scope="module")
def variants(tiny_onnx, tmp_path_factory) -> dict[str, Path]:
    """The tiny fp32 export and its fp16 and TensorRT INT8 (Q/DQ, calibrated on the embedded digits) variants,
    and the INT8 made for ONNX Runtime's CPU kernels (-int8-ort), each with its sidecar as the export writes it."""
    from mlit_edge.export.calibration import Recipe
    from mlit_edge.export.variants import Inputs, variant_of

    folder = tmp_path_factory.mktemp("variants")
    inputs = Inputs(recipe=Recipe("mnist5k", "train", 64, 0), evaluate=False)
    return {"fp32": tiny_onnx, "fp16": variant_of(tiny_onnx, "fp16", inputs, folder=folder).path,
            "int8": variant_of(tiny_onnx, "int8", inputs, folder=folder).path,
            "int8-ort": variant_of(tiny_onnx, "int8", inputs, runtime="onnxruntime", folder=folder).path}


@pytest.mark.parametrize("precision, mode", [("fp32", "FP32"), ("fp16", "FP16"), ("int8", "INT8")])
def test_an_onnx_runs_on_the_gpu_through_tensorrt_at_its_own_precision(variants, precision, mode, tmp_path):
    art = variants[precision]
    record = read_sidecar(art)
    assert record["precision"] == precision and record.get("runtime", "any") in ("any", "tensorrt")
    if precision == "int8":  # TensorRT's explicit quantization: Q/DQ pairs, which want precision_mode INT8
        import onnx

        ops = {n.op_type for n in onnx.load(str(art), load_external_data=False).graph.node}
        assert {"QuantizeLinear", "DequantizeLinear"} <= ops and "MatMulInteger" not in ops
    cfg = exported(art, tmp_path / "repo")
    assert cfg.platform == "onnxruntime_onnx" and kind(cfg) == ["KIND_GPU"] and cfg.instance_group[0].count == 1
    side = cfg.optimization.execution_accelerators
    assert len(side.gpu_execution_accelerator) == 1 and not side.cpu_execution_accelerator
    trt = side.gpu_execution_accelerator[0]
    sha = hashlib.sha256(art.read_bytes()).hexdigest()
    assert trt.name == "tensorrt" and dict(trt.parameters) == {
        "precision_mode": mode, "trt_engine_cache_enable": "1",
        "trt_engine_cache_path": f"/tmp/mlit-edge-{cfg.name}-{sha[:12]}"}
    assert record["sha256"] == sha  # the cache folder is named after the very bytes published
    # batching and tensors as before: the accelerator changes where it runs, nothing else
    assert cfg.max_batch_size == 64 and cfg.HasField("dynamic_batching") and list(cfg.input[0].dims) == [3, 36, 36]
    assert list(cfg.parameters) == ["mlit_edge_input"]  # the accelerator's parameters are its own, not the model's


def test_kind_cpu_keeps_the_config_of_old(variants, tmp_path):
    """KIND_CPU and no optimization block: what export-triton wrote for every ONNX before --kind."""
    for precision in ("fp32", "fp16", "int8"):
        cfg = exported(variants[precision], tmp_path / "repo", "--kind", "cpu")
        assert kind(cfg) == ["KIND_CPU"] and not cfg.HasField("optimization"), precision
    refused([variants["fp16"], "--kind", "cpu", "--engine-cache", "/x"], tmp_path / "no",
            "--engine-cache is where ONNX Runtime's TensorRT accelerator keeps its engines")


def test_an_onnxruntime_int8_artifact_is_refused_for_the_gpu_and_served_on_the_cpu(variants, tmp_path):
    """The -int8-ort graph is made for ONNX Runtime's CPU integer kernels (sidecar runtime "onnxruntime"), not for
    TensorRT: the GPU default says so in one line with the fix, --kind cpu serves it."""
    import onnx

    art = variants["int8-ort"]
    assert read_sidecar(art)["runtime"] == "onnxruntime"
    ops = {n.op_type for n in onnx.load(str(art), load_external_data=False).graph.node}
    assert "QuantizeLinear" in ops and "DynamicQuantizeLinear" not in ops  # static: its scales fixed at calibration
    refused([art], tmp_path / "repo", "was made for ONNX Runtime's CPU kernels", "pass --kind cpu")
    cfg = exported(art, tmp_path / "repo", "--kind", "cpu")
    assert kind(cfg) == ["KIND_CPU"] and not cfg.HasField("optimization")


def plan_io() -> dict:
    return {"inputs": [{"name": "images", "dtype": "float", "shape": [-1, 3, 36, 36]}],
            "outputs": [{"name": "logits", "dtype": "float", "shape": [-1, 10]}]}


def test_a_plan_stays_on_the_gpu_and_kind_cpu_is_refused_in_one_line(tmp_path):
    plan = fake_plan(tmp_path, plan_io())
    cfg = exported(plan, tmp_path / "repo")
    assert cfg.platform == "tensorrt_plan" and kind(cfg) == ["KIND_GPU"] and not cfg.HasField("optimization")
    refused([plan, "--kind", "cpu"], tmp_path / "no", "a TensorRT plan runs only on the GPU")
    refused([plan, "--engine-cache", "/var/cache/trt"], tmp_path / "no", "a plan is its engine already")


@pytest.mark.slow  # an export for Triton: about 4 s
def test_the_engine_cache_is_one_folder_per_artifact_under_an_absolute_root(tmp_path):
    """ONNX Runtime's engine cache key hashes model.onnx's name and the graph's tensor names, not the weights: two
    artifacts of one architecture, published under one name, get two folders."""
    one, two = tmp_path / "one" / "m.onnx", tmp_path / "two" / "m.onnx"
    for seed, art in enumerate((one, two)):
        art.parent.mkdir()
        export_tiny(art, seed=seed)
    paths = [dict(exported(art, tmp_path / f"repo{i}", "--engine-cache", "/var/cache/triton/")
                  .optimization.execution_accelerators.gpu_execution_accelerator[0].parameters)["trt_engine_cache_path"]
             for i, art in enumerate((one, two))]
    shas = [hashlib.sha256(art.read_bytes()).hexdigest()[:12] for art in (one, two)]
    assert paths == [f"/var/cache/triton/mlit-edge-m-{sha}" for sha in shas] and shas[0] != shas[1]
    for bad in ("cache", "./cache", "/tmp/a\nb"):
        refused([one, "--engine-cache", bad], tmp_path / "no", "give an absolute folder on the serving machine")


# check_config on hand-made configs: what Triton would refuse at load time, or silently ignore, refused here
IMAGES, LOGITS = Tensor("images", "TYPE_FP32", (-1, 3, 36, 36)), Tensor("logits", "TYPE_FP32", (-1, 10))
GOOD_IO = ('input [ { name: "images" data_type: TYPE_FP32 dims: [ 3, 36, 36 ] format: FORMAT_NCHW } ] '
           'output [ { name: "logits" data_type: TYPE_FP32 dims: [ 10 ] } ]')
TRT = 'optimization { execution_accelerators { gpu_execution_accelerator [ { name: "tensorrt" %s } ] } }'


def hand_made(text: str):
    return text_format.Parse(text, PB2.ModelConfig())


def onnx_config(io: str = GOOD_IO, rest: str = "", batch: int = 8) -> str:
    return f'name: "m" platform: "onnxruntime_onnx" max_batch_size: {batch} {io} {rest}'


@pytest.mark.parametrize("text, tensors, profile_max, words", [
    # dims that include the batch dimension: Triton puts -1 in front of them when max_batch_size > 0
    (onnx_config(GOOD_IO.replace("[ 3, 36, 36 ] format: FORMAT_NCHW", "[ -1, 3, 36, 36 ]")), None, None,
     "the dims include the batch dimension"),
    (onnx_config(GOOD_IO.replace("dims: [ 10 ]", "dims: [ -1, 10 ]")), None, None,
     "the dims include the batch dimension"),
    # a static-batch graph takes max_batch_size 0 and full dims
    (onnx_config(), ((Tensor("images", "TYPE_FP32", (4, 3, 36, 36)),), (Tensor("logits", "TYPE_FP32", (4, 10)),)),
     None, "a static-batch graph takes max_batch_size 0"),
    (onnx_config(batch=0), None, None, "full shape [3, 36, 36]; the model's is [-1, 3, 36, 36]"),
    (onnx_config(GOOD_IO.replace("[ 3, 36, 36 ] format: FORMAT_NCHW", "[ 3, 32, 32 ]")), None, None,
     "full shape [-1, 3, 32, 32]"),
    (onnx_config(GOOD_IO.replace('"logits"', '"probs"')), None, None, "output 'probs' is none of the model's outputs"),
    (onnx_config(GOOD_IO.replace("data_type: TYPE_FP32 dims: [ 10 ]", "data_type: TYPE_FP16 dims: [ 10 ]")), None,
     None, "is TYPE_FP16, the model's TYPE_FP32"),
    # an image format on 4 dims (a static batch's): "model input NHWC/NCHW require 3 dims"
    (onnx_config(GOOD_IO.replace("[ 3, 36, 36 ]", "[ 4, 3, 36, 36 ]").replace("[ 10 ]", "[ 4, 10 ]"), batch=0),
     ((Tensor("images", "TYPE_FP32", (4, 3, 36, 36)),), (Tensor("logits", "TYPE_FP32", (4, 10)),)), None,
     "an image format needs 3"),
    # a plan: GPU instances only, no accelerator, no batch past its profile
    (onnx_config(rest="instance_group [ { kind: KIND_CPU } ]").replace("onnxruntime_onnx", "tensorrt_plan"), None,
     None, "tensorrt_plan with KIND_CPU: a TensorRT plan runs only on the GPU"),
    (onnx_config(rest=TRT % "").replace("onnxruntime_onnx", "tensorrt_plan"), None, None,
     "gpu_execution_accelerator 'tensorrt' is unknown to tensorrt_plan (it takes none)"),
    (onnx_config(batch=32).replace("onnxruntime_onnx", "tensorrt_plan"), None, 16,
     "max_batch_size 32 exceeds the plan's batch profile maximum 16"),
    # accelerators: names per side, parameters as the ONNX Runtime backend reads them
    (onnx_config(rest=TRT.replace('"tensorrt"', '"tensorrt_llm"') % ""), None, None,
     "gpu_execution_accelerator 'tensorrt_llm' is unknown to onnxruntime_onnx (it takes cuda, tensorrt)"),
    (onnx_config(rest=TRT.replace("gpu_execution", "cpu_execution") % ""), None, None,
     "cpu_execution_accelerator 'tensorrt' is unknown to onnxruntime_onnx (it takes openvino)"),
    (onnx_config(rest=TRT.replace("[ {", '[ { name: "tensorrt" }, {') % ""), None, None, "is named twice"),
    (onnx_config(rest=TRT % 'parameters { key: "precision_mode" value: "BF16" }'), None, None,
     "precision_mode 'BF16': the ONNX Runtime backend takes FP32, FP16, INT8"),
    (onnx_config(rest=TRT % 'parameters { key: "trt_fp16_enable" value: "1" }'), None, None,
     "parameter 'trt_fp16_enable' is not one every ONNX Runtime backend takes"),
    (onnx_config(rest=TRT % 'parameters { key: "trt_engine_cache_enable" value: "yes" }'), None, None,
     "trt_engine_cache_enable is 'yes', not a boolean"),
    (onnx_config(rest=TRT % 'parameters { key: "trt_engine_cache_path" value: "cache" }'), None, None,
     "trt_engine_cache_path 'cache' is relative"),
    (onnx_config(rest="instance_group [ { kind: KIND_CPU } ] " + TRT % ""), None, None,
     "a gpu_execution_accelerator with KIND_CPU instances only is never used"),
])
def test_check_config_refuses_what_triton_would_refuse_or_ignore(text, tensors, profile_max, words):
    inputs, outputs = tensors or ((IMAGES,), (LOGITS,))
    cfg = hand_made(text)  # Triton's own parser takes every one of them
    with pytest.raises(ValueError, match="nothing was written") as e:
        check_config(cfg, list(inputs), list(outputs), profile_max)
    assert words in str(e.value) and "\n" not in str(e.value)


DYNAMIC_H = Tensor("images", "TYPE_FP32", (-1, 3, -1, 36))


@pytest.mark.parametrize("text, image", [
    # the ONNX Runtime backend README's TensorRT example, on two GPU instances, with a boolean as ParseBoolValue reads
    (onnx_config(rest=("instance_group [ { count: 2 kind: KIND_GPU } ] " + TRT % (
        'parameters { key: "precision_mode" value: "FP16" } parameters { key: "max_workspace_size_bytes" value: '
        '"1073741824" } parameters { key: "trt_engine_cache_enable" value: "True" }'))), IMAGES),
    # OpenVINO on the CPU; no instance group (KIND_AUTO)
    (onnx_config(rest='optimization { execution_accelerators { cpu_execution_accelerator [ { name: "openvino" } ] } }'),
     IMAGES),
    # a dimension the model leaves dynamic may be dynamic or fixed in the config: the backends compare fixed ones only
    (onnx_config(GOOD_IO.replace("[ 3, 36, 36 ]", "[ 3, -1, 36 ]")), DYNAMIC_H),
    (onnx_config(), DYNAMIC_H),
])
def test_check_config_takes_what_triton_takes(text, image):
    check_config(hand_made(text), [image], [LOGITS])


def test_every_config_export_triton_writes_passes_the_checker(variants, tmp_path):
    """The writer runs the checker itself (a config that broke a rule would be refused); here on what it wrote,
    read back by the test's own parser, for the GPU and the CPU."""
    from mlit_edge.stacks.triton import onnx_io

    for i, (art, more) in enumerate([(variants["fp16"], ()), (variants["int8"], ("--kind", "cpu"))]):
        cfg = exported(art, tmp_path / f"repo{i}", *more)
        check_config(cfg, *onnx_io(art))
        assert kind(cfg) == (["KIND_CPU"] if more else ["KIND_GPU"])


@pytest.mark.parametrize("precision", ["fp32", "fp16"])
def test_probabilities_serves_softmax_of_the_logits_in_float32(variants, precision, tmp_path):
    """`export-triton --probabilities`: the served graph ends in a float32 Softmax over the logits, labelled for
    the classification extension, exact against softmax(the artifact's own logits); a plan is refused."""
    import numpy as np
    import onnxruntime as ort

    art = variants[precision]
    cfg = exported(art, tmp_path / "repo", "--probabilities")
    (out,) = cfg.output
    assert out.name == "probabilities" and PB2.DataType.Name(out.data_type) == "TYPE_FP32"
    assert out.label_filename == "labels.txt"
    served = ort.InferenceSession(str(tmp_path / "repo" / cfg.name / "1" / "model.onnx"),
                                  providers=["CPUExecutionProvider"])
    logits = ort.InferenceSession(str(art), providers=["CPUExecutionProvider"])
    x = np.random.default_rng(0).standard_normal((4, 3, 36, 36)).astype(np.float32)
    p = served.run(["probabilities"], {"images": x})[0]
    z = logits.run(["logits"], {"images": x})[0].astype(np.float64)
    want = np.exp(z - z.max(1, keepdims=True))
    np.testing.assert_allclose(p, want / want.sum(1, keepdims=True), atol=1e-6)
    refused([fake_plan(tmp_path, plan_io()), "--probabilities"], tmp_path / "r2", "--probabilities", "cannot be edited")
