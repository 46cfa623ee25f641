"""legacy_graph.for_parser: an opset-18 export rewritten for TensorRT 8.5/8.6's ONNX parser (opset 17, no
LayerNormalization for 8.5, TopK's K an initializer) computes what the PyTorch model computes, passes the
8.5 operator table where the original does not, refuses what it cannot lower, and keeps fp32 through fp16."""
import collections

import numpy as np
import pytest
import torch

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from mlit_edge.engine.trt_sources import op_table  # noqa: E402
from mlit_edge.export.legacy_graph import DECOMPOSED, for_parser, layernorm_island  # noqa: E402
from mlit_edge.export.onnx_export import ORT_SESSION, export_onnx  # noqa: E402
from mlit_edge.export.source import load_for_export  # noqa: E402
from mlit_edge.model.mlit import MLiT  # noqa: E402
from mlit_edge.base.routing import routed_part  # noqa: E402
from mlit_edge.runtime.runners import OnnxRuntimeRunner  # noqa: E402

TOL = 1e-5


def _exported(model, info, path):
    export_onnx(model, path, info, opset=18, probe=True)
    return onnx.load(str(path))


def _rewrite(proto, path, layernorm="decomposed"):
    new, report = for_parser(proto, 17, layernorm, True)
    onnx.save(new, str(path))
    return new, report


def _errors_against_pytorch(model, path, batches=(1, 8)):
    """Max abs logit error of the ONNX file against the eval-mode PyTorch model, and whether every layer's
    experts are the same, over random batches of 1 and 8."""
    worst, same = 0.0, True
    with OnnxRuntimeRunner(path, session=ORT_SESSION) as run:
        for b in batches:
            x = np.random.default_rng(b).standard_normal((b, 3, model.cfg.img_size, model.cfg.img_size), np.float32)
            got = run.infer({"images": x})
            with torch.no_grad():
                logits, aux = model(torch.from_numpy(x), return_aux=True, sparse=True)
            worst = max(worst, float(np.abs(got["logits"] - logits.numpy()).max()))
            # the last layer routes the dummy token alone (export/last_token.py): compared on it
            same &= all(np.array_equal(got[f"experts_{i}"], routed_part(e.numpy(), got[f"experts_{i}"].shape[1]))
                        for i, e in enumerate(aux.experts))
    return worst, same


@pytest.fixture(scope="module")
def xxs(tmp_path_factory):
    """The real XXS size, random weights: its opset-18 export and both rewrites."""
    torch.manual_seed(0)
    model, info = load_for_export(None, "xxs", 10, random_weights=True)
    folder = tmp_path_factory.mktemp("xxs")
    original = _exported(model, info, folder / "m18.onnx")
    before = original.SerializeToString()
    decomposed, d_report = _rewrite(original, folder / "m17.onnx")
    native, n_report = _rewrite(original, folder / "m17_native.onnx", "native")
    assert original.SerializeToString() == before  # the input model is not touched
    return {"model": model, "original": original, "decomposed": decomposed, "native": native,
            "reports": (d_report, n_report), "path": folder / "m17.onnx"}


def test_tiny_rewrite_matches_pytorch(tiny_cfg, tmp_path):
    model = MLiT(tiny_cfg).eval()
    info = {"classes": [str(i) for i in range(tiny_cfg.num_classes)], "model": {"size": "custom"},
            "preprocess": {"size": tiny_cfg.img_size, "mean": [0.5] * 3, "std": [0.5] * 3}}
    _rewrite(_exported(model, info, tmp_path / "m18.onnx"), tmp_path / "m17.onnx")
    worst, same = _errors_against_pytorch(model, tmp_path / "m17.onnx")
    assert worst <= TOL and same, (worst, same)


def test_xxs_rewrite_matches_pytorch(xxs):
    worst, same = _errors_against_pytorch(xxs["model"], xxs["path"])
    assert worst <= TOL and same, (worst, same)


def test_rewrite_is_opset_17_without_layernorm_and_with_k_initializers(xxs):
    original, decomposed, native = xxs["original"], xxs["decomposed"], xxs["native"]
    ops = collections.Counter(n.op_type for n in original.graph.node)
    assert ops["LayerNormalization"] == 19 and ops["TopK"] == 9
    for new in (decomposed, native):
        assert [(o.domain, o.version) for o in new.opset_import if o.domain in ("", "ai.onnx")] == [("", 17)]
        onnx.checker.check_model(new, full_check=True)
        inits = {t.name: t for t in new.graph.initializer}
        for node in (n for n in new.graph.node if n.op_type == "TopK"):
            k = inits[node.input[1]]
            assert k.data_type == TensorProto.INT64 and list(k.dims) == [1]
        assert new.metadata_props == original.metadata_props
    assert sum(n.op_type == "LayerNormalization" for n in decomposed.graph.node) == 0
    assert sum(n.op_type == "LayerNormalization" for n in native.graph.node) == 19
    island = layernorm_island(decomposed)
    assert len(island) == 9 * 19 and not layernorm_island(native)
    # every other node is the original's, metadata and all; the island carries its LayerNorm's metadata
    by_name = {n.name: n for n in decomposed.graph.node}
    for node in original.graph.node:
        if node.op_type == "LayerNormalization":
            assert by_name[f"{node.name}{DECOMPOSED}mean"].metadata_props == node.metadata_props
        else:
            assert by_name[node.name] == node
    # Split and Pad changed signature at 18 but our graphs use the forms opset 13 reads the same way
    d_report, n_report = xxs["reports"]
    assert d_report == {"opset": 17, "converted_from_opset": 18, "lowered": {"Pad": 1, "Split": 18},
                        "lowered_rewritten": 0, "layernorm": "decomposed", "layernorm_nodes": 19,
                        "topk_k": "initializer", "topk_k_rewired": 0}
    assert n_report["layernorm"] == "native" and n_report["layernorm_nodes"] == 19


def test_only_the_rewrite_passes_the_tensorrt_85_table(xxs):
    t85, t86 = op_table("8.5"), op_table("8.6")

    def unsupported(model, table):
        return {n.op_type for n in model.graph.node if not table.supported(n.op_type)}

    opset = next(o.version for o in xxs["original"].opset_import if o.domain == "")
    assert unsupported(xxs["original"], t85) == {"LayerNormalization"} and opset > t85.max_opset
    assert unsupported(xxs["decomposed"], t85) == set() and t85.max_opset == 17
    assert "initializer" in t85.restrictions("TopK")  # what topk_k_initializer answers
    # 8.6 has LayerNormalization: the native rewrite is enough there, and not for 8.5
    assert unsupported(xxs["native"], t86) == set() and unsupported(xxs["native"], t85) == {"LayerNormalization"}


def _model(nodes, inputs, outputs, inits=(), opset=18):
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _vi(name, dims, elem=TensorProto.FLOAT):
    return helper.make_tensor_value_info(name, elem, dims)


def _same_outputs(model, new, feeds):
    for m in (model, new):
        onnx.checker.check_model(m, full_check=True)
    got = ort.InferenceSession(new.SerializeToString()).run(None, feeds)
    want = ort.InferenceSession(model.SerializeToString()).run(None, feeds)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=0, atol=1e-6)


@pytest.mark.parametrize("op", ["Resize", "ScatterND", "Col2Im", "NotAnOnnxOp"])
def test_an_op_it_cannot_lower_is_refused_by_name(op):
    ins = {"Resize": ["x", "", "scales"], "ScatterND": ["x", "idx", "x"], "Col2Im": ["x", "idx", "idx"]}
    node = helper.make_node(op, ins.get(op, ["x"]), ["y"], name="the_node")
    inits = [numpy_helper.from_array(np.ones(4, np.float32), "scales"),
             numpy_helper.from_array(np.zeros((1, 1), np.int64), "idx")]
    model = _model([node], [_vi("x", [1, 1, 2, 2])], [_vi("y", None)], inits)
    with pytest.raises(ValueError, match=f"{op} .*the_node"):
        for_parser(model, 17, "decomposed", True)


def test_pad_with_axes_and_opset_16_layernorm_are_refused():
    pads = numpy_helper.from_array(np.array([1, 1], np.int64), "pads")
    axes = numpy_helper.from_array(np.array([1], np.int64), "axes")
    pad = _model([helper.make_node("Pad", ["x", "pads", "", "axes"], ["y"], name="p")], [_vi("x", [2, 3])],
                 [_vi("y", [2, 5])], [pads, axes])
    with pytest.raises(ValueError, match="Pad 'p'.*axes"):
        for_parser(pad, 17, "native", True)
    ln = _model([helper.make_node("LayerNormalization", ["x", "s"], ["y"], name="ln")], [_vi("x", [2, 3])],
                [_vi("y", [2, 3])], [numpy_helper.from_array(np.ones(3, np.float32), "s")], opset=17)
    with pytest.raises(ValueError, match="LayerNormalization"):
        for_parser(ln, 16, "native", True)
    new, _ = for_parser(ln, 16, "decomposed", True)  # decomposed, it exists at 16 (ReduceMean-13)
    _same_outputs(ln, new, {"x": np.random.default_rng(0).standard_normal((2, 3), np.float32)})


def test_split_and_reduce_lowerings_compute_the_same():
    x = np.random.default_rng(0).standard_normal((2, 5, 3), np.float32)
    nodes = [helper.make_node("Split", ["x"], ["a", "b", "c"], axis=1, num_outputs=3, name="split"),  # 2, 2, 1
             helper.make_node("ReduceMean", ["x", "ax"], ["m"], keepdims=1, name="mean"),
             helper.make_node("ReduceMax", ["x", "ax2"], ["mx"], keepdims=0, name="max"),
             helper.make_node("ReduceL2", ["x"], ["l2"], keepdims=0, name="l2")]  # no axes: every axis
    inits = [numpy_helper.from_array(np.array([-1], np.int64), "ax"),
             numpy_helper.from_array(np.array([0, 2], np.int64), "ax2")]
    shapes = {"a": [2, 2, 3], "b": [2, 2, 3], "c": [2, 1, 3], "m": [2, 5, 1], "mx": [5], "l2": []}
    model = _model(nodes, [_vi("x", [2, 5, 3])], [_vi(n, d) for n, d in shapes.items()], inits)
    new, report = for_parser(model, 17, "decomposed", True)
    assert report["lowered"] == {"ReduceL2": 1, "ReduceMax": 1, "ReduceMean": 1, "Split": 1}
    assert report["lowered_rewritten"] == 4 and new.opset_import[0].version == 17
    assert all(len(n.input) == 1 or n.op_type == "Split" for n in new.graph.node)
    _same_outputs(model, new, {"x": x})


def test_topk_k_from_constants_becomes_an_initializer_and_a_graph_input_is_refused():
    nodes = [helper.make_node("Constant", [], ["k1"], value=numpy_helper.from_array(np.array([2], np.int64))),
             helper.make_node("TopK", ["x", "k1"], ["v1", "i1"], name="t1"),
             helper.make_node("Constant", [], ["kf"], value_float=3.0),  # a chain: Constant -> Cast -> Reshape
             helper.make_node("Cast", ["kf"], ["kc"], to=TensorProto.INT64),
             helper.make_node("Reshape", ["kc", "one"], ["k2"]),
             helper.make_node("TopK", ["x", "k2"], ["v2", "i2"], name="t2")]
    outs = [_vi("v1", [2, 2]), _vi("i1", [2, 2], TensorProto.INT64), _vi("v2", [2, 3]),
            _vi("i2", [2, 3], TensorProto.INT64)]
    model = _model(nodes, [_vi("x", [2, 6])], outs, [numpy_helper.from_array(np.array([1], np.int64), "one")])
    new, report = for_parser(model, 17, "decomposed", True)
    inits = {t.name: numpy_helper.to_array(t) for t in new.graph.initializer}
    assert report["topk_k_rewired"] == 2 and [n.op_type for n in new.graph.node] == ["TopK", "TopK"]
    assert [inits[n.input[1]].tolist() for n in new.graph.node] == [[2], [3]]
    _same_outputs(model, new, {"x": np.random.default_rng(0).standard_normal((2, 6), np.float32)})
    assert list(for_parser(model, 17, "decomposed", False)[0].graph.node) == list(model.graph.node)  # off: as is
    fed = _model([helper.make_node("TopK", ["x", "k"], ["v", "i"], name="fed")],
                 [_vi("x", [2, 6]), _vi("k", [1], TensorProto.INT64)], outs[:2])
    with pytest.raises(ValueError, match="TopK 'fed'.*not a compile-time constant"):
        for_parser(fed, 17, "native", True)


@pytest.mark.parametrize("opset", [17, 18])
def test_decomposition_of_a_positive_axis_without_bias(opset):
    """axis 1 of a rank-3 input normalises the last two dims; at opset 18 ReduceMean takes axes as an input."""
    node = helper.make_node("LayerNormalization", ["x", "s"], ["y"], axis=1, epsilon=1e-3, name="ln")
    scale = numpy_helper.from_array(np.random.default_rng(1).standard_normal((4, 3)).astype(np.float32), "s")
    model = _model([node], [_vi("x", [2, 4, 3])], [_vi("y", [2, 4, 3])], [scale], opset=opset)
    new, _ = for_parser(model, 18, "decomposed", True)
    mean = next(n for n in new.graph.node if n.name == f"ln{DECOMPOSED}mean")
    assert (len(mean.input), opset) in ((1, 17), (2, 18)) and new.graph.node[-1].op_type == "Mul"
    _same_outputs(model, new, {"x": 3 + np.random.default_rng(0).standard_normal((2, 4, 3), np.float32)})


@pytest.mark.slow  # an XXS export and its fp16 variant: about 7 s
def test_fp16_keeps_the_decomposed_layernorm_in_fp32(tmp_path):
    from mlit_edge.export.fp16 import to_fp16
    from mlit_edge.artifacts.sidecar import user_fields, write_sidecar
    from mlit_edge.train.data import load_dataset

    model, info = load_for_export("pretrained:xxs-mnist5k", None)
    record = export_onnx(model, tmp_path / "m18.onnx", info, opset=18, check=False)  # parity: the tests above
    rewritten, report = for_parser(onnx.load(str(tmp_path / "m18.onnx")), 17, "decomposed", True)
    src = tmp_path / "m17.onnx"
    onnx.save(rewritten, str(src))
    write_sidecar(src, {**user_fields(record), "opset": 17, "parser_rewrite": report})
    converted = to_fp16(src, tmp_path / "m17_fp16.onnx")
    island = layernorm_island(rewritten)
    assert len(island) == 9 * 19 and converted.info["fp32_nodes"]["layernorm_island"] == len(island)

    fp16 = onnx.shape_inference.infer_shapes(converted.proto)
    types = {v.name: v.type.tensor_type.elem_type for v in [*fp16.graph.value_info, *fp16.graph.input,
                                                            *fp16.graph.output]}
    types.update({t.name: t.data_type for t in fp16.graph.initializer})
    kept = [n for n in fp16.graph.node if n.name in island]
    assert len(kept) == len(island) and TensorProto.FLOAT16 in types.values()
    producers = {o: n for n in fp16.graph.node for o in n.output}

    def origin(name):
        """The first node before `name` that is not a Cast, and whether a Cast to fp16 lies on the way."""
        node, via_fp16 = producers.get(name), False
        while node is not None and node.op_type == "Cast":
            via_fp16 |= node.attribute[0].i == TensorProto.FLOAT16
            node = producers.get(node.input[0])
        return node, via_fp16

    for node in kept:
        assert all(types[t] == TensorProto.FLOAT for t in [*node.input, *node.output]), node.name
        for name in node.input:  # and no tensor inside the island makes an fp32 -> fp16 -> fp32 round trip
            first, via_fp16 = origin(name)
            assert not (via_fp16 and first is not None and first.name in island), (node.name, name)
    eps = {t.name: t for t in fp16.graph.initializer if t.name.endswith(f"{DECOMPOSED}epsilon")}
    assert len(eps) == 19 and all(t.data_type == TensorProto.FLOAT for t in eps.values())

    images = load_dataset("mnist5k", "test").inputs(slice(0, 200))
    with OnnxRuntimeRunner(src, session=ORT_SESSION) as a, \
            OnnxRuntimeRunner(tmp_path / "m17_fp16.onnx", session=ORT_SESSION) as b:
        want, got = a.infer({"images": images})["logits"], b.infer({"images": images})["logits"]
    assert (want.argmax(-1) == got.argmax(-1)).mean() >= 0.99
