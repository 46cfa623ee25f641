"""ONNX export, precision variants and the TensorRT check, on real sizes and a quickly trained model."""
import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

from mlit_edge.train.data import Loader, load_dataset  # noqa: E402
from mlit_edge.export.onnx_export import export_onnx
from mlit_edge.export.source import load_for_export  # noqa: E402
from mlit_edge.engine.check import check, trt_build  # noqa: E402
from mlit_edge.engine.check import DENIED, static_checks  # noqa: E402
from mlit_edge.devices.trt_env import import_trt  # noqa: E402
from mlit_edge.model.mlit import MLiT, new_model  # noqa: E402
from mlit_edge.export.calibration import Recipe  # noqa: E402
from mlit_edge.export.fp16 import to_fp16  # noqa: E402
from mlit_edge.export.precision import router_nodes, to_int8  # noqa: E402
from mlit_edge.export.variants import Inputs, variant_of  # noqa: E402
from mlit_edge.base.routing import routed_part  # noqa: E402
from mlit_edge.runtime.runners import OnnxRuntimeRunner
from mlit_edge.export.static import to_deploy  # noqa: E402
from mlit_edge.export.torch_runner import TorchRunner  # noqa: E402
from mlit_edge.artifacts.sidecar import read_sidecar  # noqa: E402
from tests.helpers import run_cli  # noqa: E402


# each real size exports for 7-40 s (per worker that needs it), so its users are all `slow`; the fast
# subset (-m "not slow") exports the tiny configuration instead (test_deploy_form_is_exact_with_attention_biases...)
@pytest.fixture(scope="module", params=[pytest.param(size, marks=pytest.mark.slow) for size in ("xxs", "xs", "s")])
def exported(request, tmp_path_factory):
    torch.manual_seed(0)
    model, info = load_for_export(None, request.param, 10, random_weights=True)
    path = tmp_path_factory.mktemp(request.param) / "model.onnx"
    export_onnx(model, path, info, probe=True)
    return model, path


@pytest.mark.parametrize("batch", [1, 8])
def test_onnxruntime_matches_pytorch_with_same_routing(exported, batch):
    """The portable graph of S, XS and XXS, its last layer for the dummy token alone (export/last_token.py):
    logits within 1e-5 of PyTorch and the same experts in every layer (the last: the dummy token's)."""
    model, path = exported
    x = np.random.default_rng(batch).standard_normal((batch, 3, 36, 36)).astype(np.float32)
    with OnnxRuntimeRunner(path) as ort_run:
        got = ort_run.infer({"images": x})
    with torch.no_grad():
        logits, aux = model(torch.from_numpy(x), return_aux=True, sparse=True)  # the sparse reference
    assert np.abs(got["logits"] - logits.numpy()).max() <= 1e-5
    tokens = [got[f"experts_{i}"].shape[1] for i in range(model.cfg.depth)]
    assert tokens == [model.cfg.num_tokens] * (model.cfg.depth - 1) + [1]
    for i, experts in enumerate(aux.experts):
        assert np.array_equal(got[f"experts_{i}"], routed_part(experts.numpy(), tokens[i]))


def test_exported_graph_is_static_and_has_no_denied_ops(exported):
    _, path = exported
    rep = static_checks(path)
    assert rep.ok, rep.problems
    assert not set(rep.ops) & DENIED and "Attention" not in rep.ops
    assert 18 <= rep.opset <= 20 and rep.ops["LayerNormalization"] > 0 and rep.ops["TopK"] > 0


def test_sidecar_and_metadata_record_provenance(exported):
    model, path = exported
    record = read_sidecar(path)
    assert record["precision"] == "fp32" and record["opset"] == 18 and record["batch"] == "dynamic"
    assert record["model"]["params"] == sum(p.numel() for p in model.parameters())
    assert record["random_weights"] and record["parity"]["max_abs_err"] <= 1e-4
    meta = {p.key: p.value for p in onnx.load(str(path)).metadata_props}
    assert json.loads(meta["mlit_edge"])["model"]["config"]["depth"] == model.cfg.depth


def test_static_check_catches_denied_ops_dynamic_shapes_and_topk(tmp_path):
    from onnx import TensorProto, helper

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "n"])
    k = helper.make_tensor_value_info("k", TensorProto.INT64, [1])
    nodes = [helper.make_node("NonZero", ["x"], ["nz"]), helper.make_node("TopK", ["x", "k"], ["v", "i"])]
    outs = [helper.make_tensor_value_info(n, TensorProto.FLOAT if n == "v" else TensorProto.INT64, None)
            for n in ("nz", "v", "i")]
    model = helper.make_model(helper.make_graph(nodes, "g", [x, k], outs), opset_imports=[helper.make_opsetid("", 18)])
    onnx.save(model, tmp_path / "bad.onnx")
    problems = " | ".join(static_checks(tmp_path / "bad.onnx").problems)
    assert "NonZero" in problems and "dynamic non-batch" in problems and "k is computed at run time" in problems


@pytest.fixture(scope="module")
def trained(trained_checkpoint, trained_probe_onnx, tmp_path_factory):
    """The trained small mLiT, its export with routing outputs (tests/conftest.py), and fp16 and INT8
    variants of it, made in a folder of this module's: {"fp32": path, "fp16": path, "int8": path}."""
    model, _ = trained_checkpoint
    folder = tmp_path_factory.mktemp("trained")
    paths = {"fp32": trained_probe_onnx}
    for precision in ("fp16", "int8"):  # the one function that export and build both use
        paths[precision] = variant_of(trained_probe_onnx, precision, Inputs(model, Recipe("mnist5k", "train", 256),
                                                                           evaluate=False), folder=folder).path
    return model, paths


def _predictions(path, images):
    with OnnxRuntimeRunner(path) as r:
        return r.infer({"images": images})


@pytest.mark.slow
def test_fp16_and_int8_agree_with_pytorch_on_real_digits(trained):
    model, paths = trained
    test = load_dataset("mnist5k", "test")
    x, y = next(iter(Loader(test, 1000, train=False)))
    with torch.no_grad():
        ref = model(x).argmax(-1).numpy()
    ref_acc = (ref == y.numpy()).mean()
    assert ref_acc > 0.5  # the model has learned something, so agreement is meaningful
    agreement = {}
    for precision in ("fp16", "int8"):
        out = _predictions(paths[precision], x.numpy())
        agreement[precision] = (out["logits"].argmax(-1) == ref).mean()
    print(f"top-1 agreement with PyTorch on 1000 test digits: {agreement} (PyTorch top-1 {ref_acc:.3f})")
    assert agreement["fp16"] >= 0.99 and agreement["int8"] >= 0.95


@pytest.mark.slow
def test_precision_variants_keep_router_in_float(trained):
    _, paths = trained
    fp16 = onnx.load(str(paths["fp16"]))
    topk_inputs = {n.input[0] for n in fp16.graph.node if n.op_type == "TopK"}
    types = {vi.name: vi.type.tensor_type.elem_type for vi in onnx.shape_inference.infer_shapes(fp16).graph.value_info}
    assert all(types[t] == onnx.TensorProto.FLOAT for t in topk_inputs)  # gate logits stay fp32
    int8 = onnx.load(str(paths["int8"]))
    routers = router_nodes(onnx.load(str(paths["fp32"])))
    quantized_inputs = {i for n in int8.graph.node if n.op_type == "DequantizeLinear" for i in n.output}
    gate_matmuls = [n for n in int8.graph.node if n.name in routers and n.op_type in ("MatMul", "Gemm")]
    assert gate_matmuls and not any(i in quantized_inputs for n in gate_matmuls for i in n.input)
    assert read_sidecar(paths["int8"])["precision"] == "int8"


@pytest.fixture(scope="module")
def xxs_random_onnx(tmp_path_factory) -> Path:
    """A random-weight XXS exported once for the three precisions' builds below (each makes its variant)."""
    model, info = load_for_export(None, "xxs", 10, random_weights=True)
    path = tmp_path_factory.mktemp("xxs-random") / "m.onnx"
    export_onnx(model, path, info)
    return path


@pytest.mark.skipif(import_trt() is None, reason="needs tensorrt or tensorrt_rtx (pip install 'mlit-edge[trt-check]')")
@pytest.mark.slow
@pytest.mark.parametrize("precision", ["fp32", "fp16", "int8"])
def test_tensorrt_builds_xxs_engines(xxs_random_onnx, tmp_path, precision):
    path = xxs_random_onnx
    if precision == "fp16":
        to_fp16(path, tmp_path / "m.fp16.onnx")
        path = tmp_path / "m.fp16.onnx"
    elif precision == "int8":
        calib = np.random.default_rng(0).standard_normal((32, 3, 36, 36)).astype(np.float32)
        to_int8(path, tmp_path / "m.int8.onnx", calib, {"name": "noise"})
        path = tmp_path / "m.int8.onnx"
    result = trt_build(path)
    assert result["ok"], result.get("errors")
    assert result["layers"] > 100 and result["engine_bytes"] > 0
    assert check(path).ok


@pytest.mark.skipif(shutil.which("polygraphy") is None and not (Path(sys.executable).parent / "polygraphy").exists(),
                    reason="polygraphy is not installed")
@pytest.mark.slow
def test_polygraphy_runs_the_export_with_onnxruntime(trained):
    _, paths = trained
    exe = shutil.which("polygraphy") or str(Path(sys.executable).parent / "polygraphy")
    proc = subprocess.run([exe, "run", str(paths["fp32"]), "--onnxrt", "--input-shapes", "images:[4,3,36,36]"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "PASSED" in proc.stdout + proc.stderr


@pytest.mark.slow
def test_torch_runner_and_ort_runner_share_the_interface(trained):
    model, paths = trained
    x = np.zeros((2, 3, 36, 36), np.float32)
    names = ["logits"] + [f"experts_{i}" for i in range(model.cfg.depth)]
    with TorchRunner(to_deploy(model, probe=True), names, (None, 3, 36, 36)) as a, \
            OnnxRuntimeRunner(paths["fp32"]) as b:
        for r in (a, b):  # the contract lives on the base class: nothing is asked of the backend
            assert r.is_active and r.input_names == ["images"] and r.static_batch is None
            assert r.input_shape == (None, 3, 36, 36) and r.route_names == names[1:]
        assert np.abs(a.infer({"images": x})["logits"] - b.infer({"images": x})["logits"]).max() < 1e-4
    assert not a.is_active and not b.is_active
    with pytest.raises(RuntimeError, match="closed"):
        b.infer({"images": x})


@pytest.mark.parametrize("args,message", [
    (["check", "NOT_THERE.onnx"], "does not exist"),
    (["export", "--size", "xxs", "--out", "/proc/no-such-dir/m.onnx"], "cannot write to the output folder"),
    (["export", "--size", "xxs", "--precision", "fp8"], "choose from"),
    (["export", "--size", "xxl"], "valid sizes"),
])
def test_export_and_check_bad_input(tmp_path, args, message):
    proc = run_cli(*args, cwd=tmp_path, check=False)
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    assert message in proc.stderr.strip().splitlines()[-1]
    assert list(tmp_path.iterdir()) == []  # nothing half-written


def test_check_refuses_a_non_onnx_file(tmp_path):
    (tmp_path / "x.onnx").write_bytes(b"\x00garbage")
    proc = run_cli("check", tmp_path / "x.onnx", check=False)
    assert proc.returncode != 0 and "is not a loadable ONNX model" in proc.stderr


def test_export_refuses_checkpoint_of_another_size(tmp_path):
    from mlit_edge.train.checkpoint import make_checkpoint, save_atomic

    model = new_model("xxs", num_classes=10)
    meta = {"name": "mnist5k", "classes": [str(i) for i in range(10)], "mean": [0.1] * 3, "std": [0.3] * 3}
    save_atomic(make_checkpoint("mlit", model, model.cfg, "xxs", meta), tmp_path / "c.pt")
    proc = run_cli("export", "--checkpoint", tmp_path / "c.pt", "--size", "s", "--out", tmp_path / "m.onnx", check=False)
    assert proc.returncode != 0 and "not S" in proc.stderr and not (tmp_path / "m.onnx").exists()


@pytest.mark.parametrize("shared", [(), ("w",), ("v",), ("w2",), ("w", "v"), ("w", "w2"), ("v", "w2"), ("w", "v", "w2")])
def test_deploy_form_is_exact_for_every_sharing_arrangement(tiny_cfg, shared):
    from mlit_edge.model.config import MLiTConfig

    model = MLiT(MLiTConfig(**{**tiny_cfg.__dict__, "shared": shared})).eval()
    x = torch.randn(3, 3, tiny_cfg.img_size, tiny_cfg.img_size)
    with torch.no_grad():
        ref, aux = model(x, return_aux=True, sparse=True)  # the per-expert dispatch reference
        logits, *routes = to_deploy(model, probe=True)(x)
    assert (logits - ref).abs().max() <= 1e-5
    assert all(torch.equal(routed_part(a, b.shape[1]), b) for a, b in zip(aux.experts, routes))


def test_deploy_form_is_exact_with_attention_biases_and_exports_them(tiny_cfg, tmp_path):
    """The other reading of the paper's bias sentence (`attn_bias=True`): QKV and output biases, non-zero
    here, ride in the deploy form's Gemms, and the ONNX export computes the same logits and routes."""
    model = MLiT(tiny_cfg.replace(attn_bias=True)).eval()
    with torch.no_grad():
        for blk in model.blocks:
            blk.attn.qkv.bias.normal_()
            blk.attn.proj.bias.normal_()
    x = torch.randn(3, 3, tiny_cfg.img_size, tiny_cfg.img_size)
    with torch.no_grad():
        ref, aux = model(x, return_aux=True, sparse=True)
        logits, *routes = to_deploy(model, probe=True)(x)
    assert (logits - ref).abs().max() <= 1e-5
    assert all(torch.equal(routed_part(a, b.shape[1]), b) for a, b in zip(aux.experts, routes))
    info = {"classes": [str(i) for i in range(5)], "preprocess": {}, "model": {}}
    record = export_onnx(model, tmp_path / "b.onnx", info, probe=True)  # checked against PyTorch, or it raises
    assert record["parity"]["routing_equal"] and record["parity"]["max_abs_err"] <= 1e-5


def _assert_lean(graph, depth: int) -> None:
    from mlit_edge.engine.check import nodes_per_layer

    ops = {n.op_type for n in graph.graph.node}
    assert not ops & {"Shape", "Concat", "Expand", "Range", "ConstantOfShape", "Where"}
    per_layer = nodes_per_layer(graph)
    probe = 2 if "experts_0" in str(graph.graph.output) else 0
    assert len(per_layer) == depth and max(per_layer[:-1]) <= 30 + probe
    # the last layer for the dummy token alone (export/last_token.py): its query and key/value Gemms apart and
    # two static slices of the dummy token's rows
    assert per_layer[-1] <= 34 + probe


def test_deploy_graph_is_lean_and_free_of_shape_arithmetic(exported):
    model, path = exported
    _assert_lean(onnx.load(str(path)), model.cfg.depth)


@pytest.mark.slow
def test_a_fixed_batch_graph_is_as_lean(tmp_path):
    """A fixed batch: the same graph with static shapes. The form does not depend on the size (every size's
    dynamic-batch graph is checked above), so one real size is exported at a fixed batch."""
    torch.manual_seed(0)
    model, info = load_for_export(None, "xxs", 10, random_weights=True)
    export_onnx(model, tmp_path / "static.onnx", info, batch=4)
    graph = onnx.load(str(tmp_path / "static.onnx"))
    assert [d.dim_value for d in graph.graph.input[0].type.tensor_type.shape.dim][0] == 4
    _assert_lean(graph, model.cfg.depth)


def test_ctrl_c_inside_the_exporter_is_an_interruption_not_a_failed_export(tiny_cfg, tmp_path, monkeypatch):
    """The dynamo exporter wraps KeyboardInterrupt in its own "Failed to export" error; export must
    still stop as interrupted (exit 130), with nothing published."""
    def interrupted(*args, **kwargs):
        try:
            raise KeyboardInterrupt
        except KeyboardInterrupt as e:
            raise RuntimeError("Failed to export the model with torch.export.") from e

    monkeypatch.setattr(torch.onnx, "export", interrupted)
    info = {"classes": [str(i) for i in range(tiny_cfg.num_classes)], "model": {"size": "custom"},
            "preprocess": {"size": tiny_cfg.img_size, "mean": [0.5] * 3, "std": [0.5] * 3}}
    with pytest.raises(KeyboardInterrupt):
        export_onnx(MLiT(tiny_cfg).eval(), tmp_path / "m.onnx", info)
    assert list(tmp_path.iterdir()) == []

    def broken(*args, **kwargs):
        raise RuntimeError("Failed to export the model with torch.export.")

    monkeypatch.setattr(torch.onnx, "export", broken)  # a real failure stays one
    with pytest.raises(RuntimeError, match="Failed to export"):
        export_onnx(MLiT(tiny_cfg).eval(), tmp_path / "m.onnx", info)


def test_fp16_of_a_graph_with_unnamed_nodes(tmp_path):
    """ONNX node names are optional; onnxconverter-common's cast pass keys nodes by name and raised an
    AttributeError on a graph whose nodes have none."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    from mlit_edge.export.precision import name_nodes
    from mlit_edge.artifacts.sidecar import write_sidecar

    w = np.random.default_rng(0).standard_normal((12, 4)).astype(np.float32)
    graph = helper.make_graph([helper.make_node("Flatten", ["images"], ["flat"]),
                               helper.make_node("MatMul", ["flat", "w"], ["logits"]),
                               helper.make_node("Relu", ["logits"], ["unused"])], "g",
                              [helper.make_tensor_value_info("images", TensorProto.FLOAT, ["N", 3, 2, 2])],
                              [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", 4])],
                              [numpy_helper.from_array(w, "w")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.graph.node[2].name = "dup"
    model.graph.node[1].name = "dup"
    src = tmp_path / "g.onnx"
    onnx.save(model, src)
    write_sidecar(src, {"precision": "fp32", "classes": list("abcd"),
                        "preprocess": {"size": 2, "mean": [0.5] * 3, "std": [0.5] * 3}})
    to_fp16(src, tmp_path / "g16.onnx")
    out = onnx.load(str(tmp_path / "g16.onnx"))
    names = [n.name for n in out.graph.node]
    assert all(names) and len(set(names)) == len(names)
    x = np.random.default_rng(1).standard_normal((2, 3, 2, 2)).astype(np.float32)
    with OnnxRuntimeRunner(tmp_path / "g16.onnx") as r:
        np.testing.assert_allclose(r.infer({"images": x})["logits"], x.reshape(2, -1) @ w, atol=2e-2)
    assert name_nodes(out) == 0  # already unique: nothing renamed
