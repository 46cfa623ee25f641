"""int8-ort's INT8 matmuls written as MatMulIntegerToFloat (export/integer_gemm.py): the same arithmetic as the
Q/DQ MatMul or Gemm ONNX Runtime would fuse on its own, with the Gemms it cannot read left as they are."""
import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from mlit_edge.export.integer_gemm import integer_gemms, split_outputs  # noqa: E402

K, N = 16, 12


def qdq_gemm(trans_b: bool, residual: bool = False):
    """x (uint8 Q/DQ) times an int8 per-channel weight plus an int32 bias (or the activation `r`), as ONNX
    Runtime's quantizer writes it."""
    rng = np.random.default_rng(3)
    w = rng.integers(-127, 128, (N, K) if trans_b else (K, N)).astype(np.int8)
    a_scale, w_scale = np.float32(0.03), (rng.random(N) * 0.01 + 0.005).astype(np.float32)
    inits = [numpy_helper.from_array(w, "w_q"), numpy_helper.from_array(w_scale, "w_s"),
             numpy_helper.from_array(np.zeros(N, np.int8), "w_z"), numpy_helper.from_array(np.array(a_scale), "a_s"),
             numpy_helper.from_array(np.array(np.uint8(120)), "a_z"),
             numpy_helper.from_array(rng.integers(-5000, 5000, N).astype(np.int32), "b_q"),
             numpy_helper.from_array(a_scale * w_scale, "b_s"), numpy_helper.from_array(np.zeros(N, np.int32), "b_z")]
    nodes = [helper.make_node("QuantizeLinear", ["x", "a_s", "a_z"], ["x_q"]),
             helper.make_node("DequantizeLinear", ["x_q", "a_s", "a_z"], ["x_dq"]),
             helper.make_node("DequantizeLinear", ["w_q", "w_s", "w_z"], ["w"], axis=0 if trans_b else 1),
             helper.make_node("DequantizeLinear", ["b_q", "b_s", "b_z"], ["b"], axis=0),
             helper.make_node("Gemm", ["x_dq", "w", "r" if residual else "b"], ["y"], name="proj", transB=int(trans_b))]
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", K])]
    if residual:
        inputs.append(helper.make_tensor_value_info("r", TensorProto.FLOAT, ["batch", N]))
    graph = helper.make_graph(nodes, "g", inputs, [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", N])],
                              inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])


def run(model, feed: dict) -> np.ndarray:
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
    return ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"]).run(None, feed)[0]


@pytest.mark.parametrize("trans_b", [False, True], ids=["B as K x N", "transB"])
def test_a_biased_qdq_gemm_becomes_one_matmul_integer_to_float_with_the_same_answer(trans_b):
    model = qdq_gemm(trans_b)
    x = np.random.default_rng(0).standard_normal((37, K)).astype(np.float32)
    before = run(model, {"x": x})  # ONNX Runtime's QGemm
    assert integer_gemms(model) == 1
    ops = [(n.op_type, n.domain, n.name) for n in model.graph.node]
    assert ops == [("QuantizeLinear", "", ""), ("MatMulIntegerToFloat", "com.microsoft", "proj")]
    assert {t.name for t in model.graph.initializer} == {"a_s", "a_z", "proj_B_int8", "proj_B_scale",
                                                         "proj_B_zero_point", "proj_bias"}
    assert numpy_helper.to_array(model.graph.initializer[-4]).shape == (K, N)  # B is K x N whatever transB was
    assert any(o.domain == "com.microsoft" for o in model.opset_import)
    after = run(model, {"x": x})
    assert np.abs(after - before).max() <= 1e-5 * max(1.0, float(np.abs(before).max()))
    # integer products: a row's answer does not depend on the rows beside it
    assert np.array_equal(np.concatenate([run(model, {"x": x[i:i + 1]}) for i in range(len(x))]), after)


def test_a_gemm_adding_an_activation_is_left_as_it_is():
    model = qdq_gemm(False, residual=True)
    before = model.SerializeToString()
    assert integer_gemms(model) == 0 and model.SerializeToString() == before


def test_a_residual_matmul_and_its_add_stay_integer_where_onnx_runtime_would_fuse_them_into_a_float_gemm():
    """The attention's output projection (`precision.split_residual_gemms`): MatMul + Add of an activation. Left
    to ONNX Runtime, the two become one Gemm on dequantized weights, a float kernel."""
    model = qdq_gemm(False, residual=True)
    gemm = model.graph.node[-1]
    gemm.op_type = "MatMul"
    del gemm.input[2:], gemm.attribute[:]
    gemm.output[0] = "product"
    model.graph.node.append(helper.make_node("Add", ["product", "r"], ["y"], name="proj_residual"))
    rng = np.random.default_rng(1)
    feed = {"x": rng.standard_normal((29, K)).astype(np.float32), "r": rng.standard_normal((29, N)).astype(np.float32)}
    before = run(model, feed)
    assert integer_gemms(model) == 1
    assert [n.op_type for n in model.graph.node] == ["QuantizeLinear", "MatMulIntegerToFloat", "Add"]
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
    session = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    after = session.run(None, feed)[0]
    assert np.abs(after - before).max() <= 1e-5 * max(1.0, float(np.abs(before).max()))
    alone = np.concatenate([session.run(None, {k: v[i:i + 1] for k, v in feed.items()})[0] for i in range(29)])
    assert np.array_equal(alone, after)


def split_product():
    """The biased Q/DQ Gemm's product reshaped to (-1, 4, 3) and split 3 + 1 along the 4, as the MoE's input
    projection (`[W_1 ... W_E | V]`) is."""
    model = qdq_gemm(False)
    model.graph.node[-1].output[0] = "product"
    model.graph.initializer.extend([numpy_helper.from_array(np.array([-1, 4, 3], np.int64), "shape"),
                                    numpy_helper.from_array(np.array([3, 1], np.int64), "sizes")])
    model.graph.node.extend([helper.make_node("Reshape", ["product", "shape"], ["grouped"], name="view"),
                             helper.make_node("Split", ["grouped", "sizes"], ["experts", "v"], name="split", axis=1)])
    del model.graph.output[:]
    model.graph.output.extend([helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in ("experts", "v")])
    return model


def test_a_product_reshaped_and_split_becomes_one_matmul_per_part_with_the_same_values():
    model = split_product()
    x = np.random.default_rng(2).standard_normal((23, K)).astype(np.float32)
    assert integer_gemms(model) == 1
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED

    def outputs():
        return ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"]).run(None, {"x": x})

    before = outputs()
    assert split_outputs(model) == 1
    assert [n.op_type for n in model.graph.node] == ["QuantizeLinear", "MatMulIntegerToFloat", "Reshape",
                                                      "MatMulIntegerToFloat", "Reshape"]
    after = outputs()
    assert [a.shape for a in after] == [(23, 3, 3), (23, 1, 3)]
    assert all(np.array_equal(a, b) for a, b in zip(before, after))  # the same columns: the same values
    assert split_outputs(model) == 0  # nothing left to split


def test_a_product_read_by_more_than_the_reshape_is_not_split():
    model = split_product()
    model.graph.node.append(helper.make_node("Identity", ["product"], ["y"]))
    model.graph.output.append(helper.make_tensor_value_info("y", TensorProto.FLOAT, None))
    assert integer_gemms(model) == 1
    assert split_outputs(model) == 0 and "Split" in [n.op_type for n in model.graph.node]
