"""export/smoothing.py: SmoothQuant-style smoothing is an exact fp32 rewrite (same logits and experts on images it
was not calibrated on) in each graph form, narrows the channels' ranges it is for, refuses a rewrite that is not
exact, and leaves the INT8 graph's Q/DQ structure as it was."""
import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

from mlit_edge.export import smoothing  # noqa: E402
from mlit_edge.export.int8_recipe import TODAY, Int8Recipe, router_nodes  # noqa: E402
from mlit_edge.export.precision import to_int8  # noqa: E402
from tests.export.test_int8_recipe import _export  # noqa: E402

RNG = np.random.default_rng(0)
CALIB = RNG.standard_normal((48, 3, 36, 36)).astype(np.float32)
FRESH = RNG.standard_normal((16, 3, 36, 36)).astype(np.float32)


def _outputs(model, images, extra=()):
    names = [model.graph.output[0].name] + [n.output[1] for n in model.graph.node if n.op_type == "TopK"]
    return smoothing._run(model, images, names + list(extra))[0]


def _skewed(tmp_path, form):
    """A tiny export whose LayerNorm scales have outlier channels, as trained ViTs' do."""
    model = _export(tmp_path, form)
    for init in model.graph.initializer:
        if init.name.endswith("norm1.weight") or init.name.endswith("norm2.weight"):
            w = onnx.numpy_helper.to_array(init).copy()
            w[::7] *= 20.0
            init.CopyFrom(onnx.numpy_helper.from_array(w, init.name))
    return model


@pytest.mark.parametrize("form", ["portable", "fused"])
def test_smoothing_is_exact_and_reaches_every_site(tmp_path, form):
    model = _skewed(tmp_path, form)
    depth = sum(n.op_type == "TopK" for n in model.graph.node)
    smoothed, record = smoothing.smooth(model, CALIB, 0.5, router_nodes(model))
    # every layer's two LayerNorms and its two column sites (value projection -> output projection, V -> W2)
    assert record["layernorms"] >= 2 * depth and record["value_columns"] == 2 * depth
    before, after = _outputs(model, FRESH), _outputs(smoothed, FRESH)
    assert np.abs(before[0] - after[0]).max() <= 1e-5 * max(1.0, np.abs(before[0]).max())
    for b, a in zip(before[1:], after[1:]):
        np.testing.assert_array_equal(np.sort(b, -1), np.sort(a, -1))
    changed = sum(not np.array_equal(onnx.numpy_helper.to_array(x), onnx.numpy_helper.to_array(y))
                  for x, y in zip(model.graph.initializer, smoothed.graph.initializer))
    assert changed >= 4 * depth


def test_smoothing_narrows_the_outlier_channels(tmp_path):
    model = _skewed(tmp_path, "portable")
    smoothed, _ = smoothing.smooth(model, CALIB, 0.5, router_nodes(model))
    ln = [n.output[0] for n in model.graph.node if n.op_type == "LayerNormalization"][1]

    def spread(m):  # the largest channel's range over the median channel's: what a per-tensor int8 scale pays
        x = smoothing._run(m, CALIB, [ln])[0][0]
        x = np.abs(x).reshape(-1, x.shape[-1]).max(0)
        return x.max() / np.median(x)

    assert spread(smoothed) < 0.5 * spread(model)


def test_a_rewrite_that_is_not_exact_is_refused(tmp_path, monkeypatch):
    model = _export(tmp_path, "portable")
    real = smoothing.column_map

    def shifted(*args):
        got = real(*args)
        return None if got is None else np.roll(got, 1)  # each channel scaled as its neighbour

    monkeypatch.setattr(smoothing, "column_map", shifted)
    with pytest.raises(ValueError, match="not exact"):
        smoothing.smooth(model, CALIB, 0.5, router_nodes(model))


def test_the_decomposed_layernorm_is_left_alone(tmp_path):
    model = _export(tmp_path, "trt8.5")
    smoothed, record = smoothing.smooth(model, CALIB, 0.5, router_nodes(model))
    assert record["layernorms"] == 0 and record["value_columns"] > 0  # smoothing checked itself exact


def test_smoothed_int8_keeps_the_qdq_structure(tmp_path):
    _export(tmp_path, "portable")
    src = tmp_path / "portable.onnx"  # with its sidecar, as the INT8 maker reads it
    graphs = {}
    for label, recipe in (("plain", TODAY), ("smoothed", Int8Recipe(smooth=0.5))):
        made = to_int8(src, tmp_path / f"{label}.onnx", CALIB, {"name": "noise"}, recipe=recipe)
        graphs[label] = made
    plain, smooth = (graphs[k].proto.graph for k in ("plain", "smoothed"))
    def wiring(graph):  # a LayerNorm's own weights get new names; everything else is wired as before
        return [(n.op_type, list(n.input[:1] if n.op_type == "LayerNormalization" else n.input)) for n in graph.node]

    assert wiring(plain) == wiring(smooth)
    assert sum(n.op_type == "QuantizeLinear" for n in smooth.node) > 10
    assert graphs["smoothed"].info["calibration"]["smoothing"]["alpha"] == 0.5
    assert "smoothing" not in graphs["plain"].info["calibration"]
