"""Error-compensating INT8 weight rounding (export/weight_rounding.py): it keeps a layer's output closer to the
float layer's than rounding each weight to its nearest step, and changes nothing else in the graph."""
import numpy as np
import pytest

from mlit_edge.export.weight_rounding import output_error, round_weights


def correlated(k: int, rows: int, seed: int, draw: int = 0) -> np.ndarray:
    """Inputs whose channels are correlated and of unequal energy, as a LayerNorm's outputs are: the
    distribution is `seed`'s, the sample `draw`'s."""
    mix = np.random.default_rng(seed).normal(size=(k, k)) * np.linspace(0.2, 3.0, k)
    return np.random.default_rng((seed, draw)).normal(size=(rows, k)) @ mix


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_rounding_keeps_the_output_closer_than_nearest(seed):
    rng = np.random.default_rng(seed)
    w = rng.normal(size=(48, 32))
    scale = np.abs(w).max(1) / 127
    x = correlated(32, 4096, seed)
    h = x.T @ x / len(x)
    nearest = np.clip(np.round(w / scale[:, None]), -127, 127)
    q = round_weights(w, scale, h)
    assert q.dtype == np.int8 and q.shape == w.shape and np.abs(q.astype(int)).max() <= 127
    assert np.abs(q - nearest).mean() < 1  # the same grid: most weights a step from nearest or on it
    assert output_error(w, q, scale, h) < 0.7 * output_error(w, nearest, scale, h)
    # and on inputs it was not fitted to, from the same distribution
    fresh = correlated(32, 4096, seed, draw=1)
    err = lambda v: float(np.mean((fresh @ (v * scale[:, None] - w).T) ** 2))  # noqa: E731
    assert err(q) < err(nearest)


def test_uncorrelated_inputs_round_to_nearest():
    """With H diagonal no channel's error can be moved onto another: GPTQ is nearest rounding."""
    rng = np.random.default_rng(3)
    w = rng.normal(size=(16, 8))
    scale = np.abs(w).max(1) / 127
    h = np.diag(rng.uniform(0.5, 2.0, 8))
    assert np.array_equal(round_weights(w, scale, h), np.clip(np.round(w / scale[:, None]), -127, 127))


def test_a_channel_no_input_reaches_is_zero():
    rng = np.random.default_rng(4)
    w = rng.normal(size=(8, 6))
    x = correlated(6, 512, 4)
    x[:, 2] = 0
    q = round_weights(w, np.abs(w).max(1) / 127, x.T @ x / len(x))
    assert not q[:, 2].any()


def test_gptq_recipe_rewrites_only_int8_weights(tiny_onnx, tmp_path):
    """The tiny export's int8-ort with the shipped recipe and with nearest rounding: the same nodes, scales and float weights; INT8
    weight values moved; the recorded output error lower; and the logits still the same in any batch."""
    onnx = pytest.importorskip("onnx")
    from dataclasses import replace

    from onnx import numpy_helper

    from mlit_edge.export.calibration import Recipe, calibration_set
    from mlit_edge.export.int8_recipe import ONNXRUNTIME
    from mlit_edge.export.precision import batch_drift, to_int8_ort
    from mlit_edge.export.onnx_export import ORT_SESSION

    calib = calibration_set(Recipe("mnist5k", "train", 64, 0)).images
    plain, rounded = tmp_path / "plain.onnx", tmp_path / "gptq.onnx"
    to_int8_ort(tiny_onnx, plain, calib, {}, recipe=replace(ONNXRUNTIME, rounding="nearest"))
    made = to_int8_ort(tiny_onnx, rounded, calib, {})  # the shipped recipe rounds with GPTQ
    record = made.info["quantization"]["rounded"]
    assert record["matmuls"] > 0 and record["output_error"] < record["output_error_nearest"]
    a, b = onnx.load(str(plain)), onnx.load(str(rounded))
    assert [n.op_type for n in a.graph.node] == [n.op_type for n in b.graph.node]
    moved = set()  # the matmuls whose INT8 weights moved (the MoE's input projection is written in parts)
    for x, y in zip(a.graph.initializer, b.graph.initializer):
        u, v = numpy_helper.to_array(x), numpy_helper.to_array(y)
        assert x.name == y.name and u.dtype == v.dtype
        if u.dtype == np.int8 and u.ndim == 2:
            if not np.array_equal(u, v):
                moved.add(x.name.split("_part")[0])
        else:
            assert np.array_equal(u, v), x.name  # scales, zero points, biases, float weights: untouched
    assert len(moved) == record["matmuls"]
    assert batch_drift(rounded, calib, ORT_SESSION)["max_abs_logit"] == 0
