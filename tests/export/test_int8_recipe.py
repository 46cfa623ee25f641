"""export/int8_recipe.py: every matmul-class node of an export classified by its place in the graph (checked here
against the weight each one reads, which the classifier never looks at), in the portable, ONNX Runtime's fused and
TensorRT 8.5's rewritten graph; and the nodes a recipe keeps in float carry no Q/DQ in the INT8 graph."""
import re

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

from mlit_edge.export.int8_recipe import (ACTIVATION, ATTN_IN, ATTN_OUT, EXPERT_IN, HEAD, PATCH, ROUTER,  # noqa: E402
                                          TENSORRT, TODAY, W2, WEIGHTED, Int8Recipe, classify, float_nodes, int8_mac_share)
from mlit_edge.export.precision import to_int8  # noqa: E402
from tests.helpers import tiny_model  # noqa: E402

# the weight each class reads, by the PyTorch module's parameter names (static.StaticAttention, StaticMoE)
BY_WEIGHT = {"w_qkv": ATTN_IN, "w_q": ATTN_IN, "w_k": ATTN_IN, "w_v": ATTN_IN, "w_kv": ATTN_IN, "w_proj": ATTN_OUT,
             "w_in": EXPERT_IN, "w2": W2, "w_gate": ROUTER, "d": ROUTER}  # d: the gates mix the experts' biases
WEIGHT = re.compile(r"^blocks\.(\d+)\.(?:attn|moe)\.(\w+)$")


def _expected(model, node):
    """The class and layer the weight a node reads names (activation-by-activation matmuls read none)."""
    inits = {t.name for t in model.graph.initializer}
    producers = {o: n for n in model.graph.node for o in n.output}
    for name in node.input:
        while name not in inits and name in producers and producers[name].op_type in ("Transpose", "Reshape"):
            name = producers[name].input[0]
        if name == "patch_embed.weight":
            return PATCH, None
        if name == "head.weight":
            return HEAD, None
        m = WEIGHT.match(name)
        if m:
            return BY_WEIGHT[m.group(2)], int(m.group(1))
    return None


def _export(tmp_path, form: str, shared=("v", "w2")):
    from mlit_edge.devices.profiles import named_profile
    from mlit_edge.export.onnx_export import export_onnx
    from mlit_edge.export.source import load_for_export

    _, info = load_for_export(None, "xxs", 10, random_weights=True)
    model = tiny_model()
    if shared != model.cfg.shared:
        from mlit_edge.model.mlit import MLiT

        model = MLiT(model.cfg.replace(shared=shared)).eval()
    path = tmp_path / f"{form}.onnx"
    export_onnx(model, path, info, attention="onnx" if form == "fused" else "grouped",
                device=named_profile(jetpack="5.1") if form == "trt8.5" else None, check=False)
    return onnx.load(str(path))


@pytest.mark.parametrize("form", ["portable", "fused", "trt8.5", "experts-own-w2"])  # each other form: ~2 s export
def test_every_matmul_has_one_class_and_its_layer(tmp_path, form, request):
    """Each MatMul/Gemm/Conv gets the class and layer of the weight it reads; the ones reading two activations are
    activation matmuls (or routing); every layer has its q/k/v, output projection, MoE input and W2."""
    if form == "portable":  # the session's tiny export
        model = onnx.load(str(request.getfixturevalue("tiny_onnx")))
    else:
        model = _export(tmp_path, form, shared=("v",) if form == "experts-own-w2" else ("v", "w2"))
    got = classify(model)
    matmuls = [n for n in model.graph.node if n.op_type in ("MatMul", "Gemm", "Conv")]
    assert sorted(got) == sorted(n.name for n in matmuls)  # every one, none twice
    for node in matmuls:
        want = _expected(model, node)
        if want is None:
            assert got[node.name].op_class in (ACTIVATION, ROUTER), node.name
        else:
            assert tuple(got[node.name]) == want, node.name
    for layer in range(3):
        cells = [op.op_class for op in got.values() if op.layer == layer]
        assert cells.count(ATTN_OUT) == cells.count(EXPERT_IN) == cells.count(W2) == 1 and ATTN_IN in cells
    assert [op.op_class for op in got.values() if op.layer is None] == [PATCH, HEAD]


def test_unknown_class_or_rounding_is_refused():
    with pytest.raises(ValueError, match="unknown op class"):
        Int8Recipe(classes=("w1",))
    with pytest.raises(ValueError, match="weight rounding 'adaround': choose nearest or gptq"):
        Int8Recipe(rounding="adaround")


def _dequantized_inputs(model) -> dict[str, int]:
    """Per node, how many of its inputs come out of a DequantizeLinear."""
    dq = {n.output[0] for n in model.graph.node if n.op_type == "DequantizeLinear"}
    return {n.name: sum(i in dq for i in n.input) for n in model.graph.node}


@pytest.mark.parametrize("recipe", [Int8Recipe(classes=(W2, HEAD), layers=(1,), cells=((ATTN_OUT, 2),)), TENSORRT],
                         ids=["classes-layer-cell", "default"])
def test_float_nodes_carry_no_qdq(tiny_onnx, tmp_path, recipe):
    """The QDQ graph quantizes every weighted node but those the recipe keeps (and the router and activation
    matmuls); the kept ones read no DequantizeLinear, and the sidecar names what stayed float."""
    fp32 = onnx.load(str(tiny_onnx))
    classes = classify(fp32)
    kept = float_nodes(fp32, recipe)
    calib = np.random.default_rng(0).standard_normal((16, 3, 36, 36)).astype(np.float32)
    info, quantized = to_int8(tiny_onnx, tmp_path / "m-int8.onnx", calib, {"name": "noise"}, batch=8, recipe=recipe)
    dq = _dequantized_inputs(quantized)
    for name, op in classes.items():
        if name in kept:
            assert dq[name] == 0, (name, op)
        else:  # a weighted node in INT8 reads its activation and its weight through Q/DQ
            assert op.op_class not in (ROUTER, ACTIVATION) and dq[name] >= 2, (name, op)
    assert sum(op.op_class in WEIGHTED and recipe.keeps(op) for op in classes.values()) == len(kept - float_nodes(fp32, TODAY))
    assert info["calibration"]["float"] == recipe.describe()
    assert 0 < info["calibration"]["int8_mac_share"] <= int8_mac_share(fp32, float_nodes(fp32, TODAY))
    # Q/DQ on the weighted matmuls' inputs only (NVIDIA's placement, precision.to_int8): no output requantized
    producers = {o: n.op_type for n in quantized.graph.node for o in n.output}
    assert not [q.name for q in quantized.graph.node
                if q.op_type == "QuantizeLinear" and producers.get(q.input[0]) in ("MatMul", "Gemm", "Conv")]
    assert ("rounded" in info["calibration"]) == (recipe.rounding == "gptq")


def test_mac_share_counts_what_stays_int8(tiny_onnx):
    """Keeping every weighted class in float leaves no INT8 MACs; each class kept costs its own MACs."""
    fp32 = onnx.load(str(tiny_onnx))
    everything = Int8Recipe(classes=(PATCH, ATTN_IN, ATTN_OUT, EXPERT_IN, W2, HEAD))
    assert int8_mac_share(fp32, float_nodes(fp32, everything)) == 0.0
    today = int8_mac_share(fp32, float_nodes(fp32, TODAY))
    parts = sum(today - int8_mac_share(fp32, float_nodes(fp32, Int8Recipe(classes=(c,)))) for c in everything.classes)
    assert 0 < today < 1 and parts == pytest.approx(today)


def test_quantizer_prints_stay_off_stdout(capsys):
    """ONNX Runtime's Percentile calibrator print()s its progress; `mlit-edge build` prints the artifact's path on
    stdout for scripts, so the quantizer's chatter must not land there."""
    from mlit_edge.export.quiet import quiet

    with quiet():
        print("Collecting tensor data and making histogram ...")
    assert capsys.readouterr().out == ""
