"""The ONNX Runtime flavour (export/fused_attention.py): each layer's attention as one fused kernel, exact
against PyTorch (every form on a tiny model, the artifact's on XS and XXS), recorded in its sidecar, and refused
by everything TensorRT."""
import numpy as np
import pytest
import torch

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

from mlit_edge.export import ATTENTION_FORMS, ORT_ATTENTION  # noqa: E402
from mlit_edge.export.onnx_export import export_onnx, reference_outputs  # noqa: E402
from mlit_edge.export.source import load_for_export  # noqa: E402
from mlit_edge.export.static import to_deploy  # noqa: E402
from mlit_edge.model.mlit import MLiT  # noqa: E402
from mlit_edge.base.routing import routing_agreement  # noqa: E402
from mlit_edge.runtime.runners import OnnxRuntimeRunner, predict_all  # noqa: E402
from mlit_edge.artifacts.sidecar import read_sidecar  # noqa: E402
from tests.helpers import run_cli  # noqa: E402


def _info(cfg) -> dict:
    return {"classes": [str(i) for i in range(cfg.num_classes)], "model": {"size": "custom"},
            "preprocess": {"size": cfg.img_size, "mean": [0.5] * 3, "std": [0.5] * 3}}


def _exact(model, path, images: np.ndarray) -> tuple[float, list[float]]:
    """Max abs logit error of the ONNX file against the eval-mode PyTorch model, and each layer's routing
    agreement with PyTorch's clean top-k (the last layer of the fused graph routes the dummy token alone)."""
    with OnnxRuntimeRunner(path, expose_routing=True) as run:
        logits, routes = predict_all(run, images, routes=True)
    want, ref_routes, _ = reference_outputs(model, images)
    return float(np.abs(logits - want).max()), routing_agreement(routes, ref_routes)


@pytest.mark.slow
@pytest.mark.parametrize("size", ["xs", "xxs"])
def test_the_fused_graph_is_exact_on_real_sizes(size, tmp_path):
    """The artifact `--target onnxruntime` builds: logits within 1e-5 of PyTorch and the same experts in every
    layer, at batch 1 and 8, one kernel per layer, and a sidecar that says what it is and what runs it. XS (head 16)
    and the shipped XXS (head 18); S has XXS's head size and group ratio on more layers, and its export cost 5-6 s
    a run (tests/export/test_export.py checks its portable graph)."""
    model, info = load_for_export(None, size, 10, random_weights=True)
    path = tmp_path / "m-fp32-ort.onnx"
    record = export_onnx(model, path, info, attention=ORT_ATTENTION)
    assert record["parity"]["max_abs_err"] <= 1e-5 and record["parity"]["batches"] == [1, 8]
    for batch in (1, 8):
        x = np.random.default_rng(batch).standard_normal((batch, 3, 36, 36)).astype(np.float32)
        err, agree = _exact(model, path, x)
        assert err <= 1e-5 and agree == [1.0] * model.cfg.depth, (err, agree)
    ops = [(n.op_type, n.domain) for n in onnx.load(str(path)).graph.node]
    assert ops.count(("Attention", "")) == model.cfg.depth and ("Softmax", "") in ops  # the router's softmax
    assert record["runtime"] == "onnxruntime" and record["opset"] == 23
    assert record["attention"]["form"] == "onnx" and record["onnxruntime"]["requires"] == "1.23"
    assert read_sidecar(path)["attention"] == record["attention"]


@pytest.mark.slow
@pytest.mark.parametrize("form", list(ATTENTION_FORMS))
@pytest.mark.parametrize("attn_bias", [False, True])
def test_every_form_is_exact_with_and_without_biases(tiny_cfg, tmp_path, form, attn_bias):
    """All three ONNX Runtime kernels, on the graph as built and on its probe graph (its last layer routes the
    dummy token alone), and the torch module itself: the same function as the training model."""
    cfg = tiny_cfg.replace(attn_bias=attn_bias)
    torch.manual_seed(0)
    model = MLiT(cfg).eval()
    if attn_bias:  # non-zero biases, so that a dropped or misplaced one shows
        with torch.no_grad():
            for blk in model.blocks:
                blk.attn.qkv.bias.normal_(0, 0.5)
                blk.attn.proj.bias.normal_(0, 0.5)
    x = np.random.default_rng(0).standard_normal((8, 3, cfg.img_size, cfg.img_size)).astype(np.float32)
    with torch.no_grad():
        want = model(torch.from_numpy(x)).numpy()
        got = to_deploy(model, attention=form)(torch.from_numpy(x)).numpy()
    assert np.abs(got - want).max() <= 1e-5
    for probe in (False, True) if form == ORT_ATTENTION else (False,):  # the probe graph of what is built
        path = tmp_path / f"{form}-{probe}.onnx"
        record = export_onnx(model, path, _info(cfg), probe=probe, attention=form)
        assert record["parity"]["max_abs_err"] <= 1e-5 and record["parity"]["routing_equal"] is (True if probe else None)
        err, agree = _exact(model, path, x)
        assert err <= 1e-5 and agree == [1.0] * cfg.depth
    domains = {n.domain for n in onnx.load(str(tmp_path / f"{form}-False.onnx")).graph.node}
    assert ("com.microsoft" in domains) is form.startswith("ms-")


@pytest.mark.slow
def test_tensorrt_refuses_the_fused_graph_in_one_line(tiny_cfg, tmp_path):
    """`check` and the TensorRT build refuse the ONNX Runtime flavour: by its sidecar, and by its ops when the
    sidecar is gone (no TensorRT parse is tried on ops it has no kernels for); the contrib ops' form too."""
    from mlit_edge.engine.check import static_checks

    torch.manual_seed(0)
    model = MLiT(tiny_cfg).eval()
    path, contrib = tmp_path / "onnx.onnx", tmp_path / "ms-mha.onnx"
    export_onnx(model, path, _info(tiny_cfg), attention="onnx")
    export_onnx(model, contrib, _info(tiny_cfg), attention="ms-mha")
    bare = tmp_path / "bare.onnx"
    bare.write_bytes(path.read_bytes())
    for target in (path, bare):
        proc = run_cli("check", target, check=False)
        fails = [line for line in proc.stdout.splitlines() if "FAIL" in line]
        assert proc.returncode == 1 and "Traceback" not in proc.stderr
        assert any("ONNX Runtime's own ops (Attention (opset 23) x3)" in line for line in fails), proc.stdout
        assert "[TRT]" not in proc.stdout + proc.stderr  # no parse of a graph TensorRT cannot take
        proc = run_cli("build", "--onnx", target, "--precision", "fp32", "--target", "tensorrt-rtx", "--out",
                       tmp_path / "trt", check=False)
        lines = proc.stderr.strip().splitlines()
        assert proc.returncode == 1 and len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
        assert ("made for onnxruntime" if target == path else "ONNX Runtime's own ops") in lines[0]
    assert not (tmp_path / "trt").exists()
    rep = static_checks(contrib)
    assert not rep.ok and rep.onnxruntime_ops == {"com.microsoft.MultiHeadAttention": 3}
    assert [p for p in rep.problems if "ONNX Runtime's own ops" in p] and rep.opset == 18


def test_an_older_onnxruntime_is_refused_before_the_session(tiny_cfg, tmp_path, monkeypatch):
    """The sidecar names the oldest ONNX Runtime that runs the fused kernel; an older one is one line that
    says so (ONNX Runtime 1.22's own message is a model-load failure deep in its graph code)."""
    import onnxruntime

    from mlit_edge.runtime import Classifier
    from mlit_edge.artifacts.schema import SidecarError

    torch.manual_seed(0)
    path = tmp_path / "m-fp32-ort.onnx"
    export_onnx(MLiT(tiny_cfg).eval(), path, _info(tiny_cfg), attention="onnx")
    monkeypatch.setattr(onnxruntime, "__version__", "1.22.1")
    with pytest.raises(SidecarError, match=r"needs ONNX Runtime 1\.23 or newer for Attention \(ai\.onnx, opset 23\); "
                                           r"this is 1\.22\.1"):
        Classifier.load(path)
    monkeypatch.setattr(onnxruntime, "__version__", "1.23.0")
    with Classifier.load(path) as clf:
        assert len(clf.predict([np.zeros((12, 12, 3), np.uint8)])) == 1


def test_routing_agreement_compares_a_layer_on_the_tokens_it_routes():
    ref = np.array([[[0, 1], [1, 2], [2, 0]]])  # one image, three tokens, k = 2
    assert routing_agreement([ref, ref[:, -1:]], [ref, ref]) == [1.0, 1.0]
    assert routing_agreement([ref[:, -1:][..., ::-1]], [ref]) == [1.0]  # a set, in either order
    assert routing_agreement([np.array([[[0, 1]]])], [ref]) == [0.0]  # the last token chose (2, 0)
