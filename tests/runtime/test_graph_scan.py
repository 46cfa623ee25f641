"""The runtime's own reading of an ONNX graph (artifacts/graph_scan.py): the same nodes as the onnx
package reads, control flow and probability outputs refused, malformed bytes one line."""
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from mlit_edge.artifacts.graph_scan import GraphError, check_graph, nodes


def _model(nodes_, output="logits", subgraph=None):
    w = numpy_helper.from_array(np.ones((4, 3), np.float32), "w")
    graph = helper.make_graph(nodes_, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])],
                              [helper.make_tensor_value_info(output, TensorProto.FLOAT, ["N", 3])], [w])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]).SerializeToString()


def test_nodes_match_the_onnx_package_on_a_real_export(tiny_cfg, tmp_path):
    import torch

    from mlit_edge.export.onnx_export import export_onnx
    from mlit_edge.model.mlit import MLiT

    info = {"classes": [str(i) for i in range(tiny_cfg.num_classes)], "model": {"size": "custom"},
            "preprocess": {"size": tiny_cfg.img_size, "mean": [0.5] * 3, "std": [0.5] * 3}}
    torch.manual_seed(0)
    export_onnx(MLiT(tiny_cfg).eval(), tmp_path / "m.onnx", info, check=False)
    content = (tmp_path / "m.onnx").read_bytes()
    want = [(n.op_type, n.domain, list(n.input), list(n.output)) for n in onnx.load_from_string(content).graph.node]
    got = [(n.op_type, n.domain, n.inputs, n.outputs) for n in check_graph(content, "m.onnx")]
    assert got == want and any(op == "TopK" for op, *_ in got)


@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax", "Sigmoid"])
def test_probabilities_refused_through_identity_and_cast(op):
    content = _model([helper.make_node("MatMul", ["x", "w"], ["z"]), helper.make_node(op, ["z"], ["p"]),
                      helper.make_node("Cast", ["p"], ["q"], to=TensorProto.FLOAT),
                      helper.make_node("Identity", ["q"], ["logits"])])
    with pytest.raises(GraphError, match=f"'logits' output comes from a {op}"):
        check_graph(content, "p.onnx")
    ok = _model([helper.make_node("MatMul", ["x", "w"], ["z"]), helper.make_node(op, ["z"], ["p"]),
                 helper.make_node("Add", ["z", "p"], ["logits"])])  # a softmax inside the graph is fine
    assert len(check_graph(ok, "ok.onnx")) == 3


@pytest.mark.parametrize("op", ["If", "Loop", "Scan", "MyCustomOp"])
def test_control_flow_and_any_subgraph_refused(op):
    body = helper.make_graph([helper.make_node("Identity", ["a"], ["b"])], "body",
                             [helper.make_tensor_value_info("a", TensorProto.FLOAT, None)],
                             [helper.make_tensor_value_info("b", TensorProto.FLOAT, None)])
    node = helper.make_node(op, ["x"], ["y"], domain="" if op != "MyCustomOp" else "my.domain", body=body)
    content = _model([node, helper.make_node("MatMul", ["x", "w"], ["logits"])])
    with pytest.raises(GraphError, match=f"holds a {op} node"):
        check_graph(content, "cf.onnx")


@pytest.mark.parametrize("content", [b"\xff" * 20, b"\x3a\xff\xff\xff\xff\x0f", b"\x0b", _model([])[:-3]])
def test_malformed_bytes_are_one_line(content):
    with pytest.raises(GraphError, match="not a readable ONNX model") as e:
        check_graph(content, "bad.onnx")
    assert "\n" not in str(e.value)


def test_an_empty_graph_has_no_nodes():
    assert nodes(_model([])) == []


def test_the_version_gate_reads_the_graphs_own_opset_when_the_sidecar_lost_its_requires(tmp_path, monkeypatch):
    """Round 3: with `onnxruntime.requires` removed from the sidecar, an ONNX Runtime too old for the graph's
    opset-23 import ran it. The graph's own opset import now decides too, from its bytes."""
    import onnxruntime
    from onnx import TensorProto, helper

    from mlit_edge.runtime.artifact import open_artifact
    from mlit_edge.artifacts.graph_scan import default_opset
    from mlit_edge.artifacts.schema import SidecarError
    from mlit_edge.artifacts.sidecar import write_sidecar

    graph = helper.make_graph([helper.make_node("Identity", ["images"], ["logits"])], "g",
                              [helper.make_tensor_value_info("images", TensorProto.FLOAT, ["N", 10])],
                              [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", 10])])
    path = tmp_path / "m-fp32-ort.onnx"
    path.write_bytes(helper.make_model(graph, opset_imports=[helper.make_opsetid("com.microsoft", 1),
                                                               helper.make_opsetid("", 23)]).SerializeToString())
    assert default_opset(path.read_bytes()) == 23
    write_sidecar(path, {"precision": "fp32", "runtime": "onnxruntime"})  # no onnxruntime.requires
    monkeypatch.setattr(onnxruntime, "__version__", "1.22.1")
    with pytest.raises(SidecarError, match="needs ONNX Runtime 1.23 or newer"):
        open_artifact(path)
