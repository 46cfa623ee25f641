"""Percentile activation ranges (export/ranges.py): ONNX Runtime's rule, counted without sorting, and the ranges
the INT8 graphs actually take."""
import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

from mlit_edge.export.ranges import BINS, PERCENTILE, _Histogram  # noqa: E402


def batches(seed: int) -> list[np.ndarray]:
    """Heavy-tailed activations whose later batches reach past the first one's range."""
    rng = np.random.default_rng(seed)
    return [(rng.standard_t(3, size=(32, 50, 24)) * (1 + 0.5 * i)).astype(np.float32) for i in range(5)]


@pytest.mark.parametrize("seed", [0, 1])
def test_the_histogram_gives_onnxruntimes_percentile_range(seed):
    from onnxruntime.quantization.calibrate import HistogramCollector

    data = batches(seed)
    theirs = HistogramCollector("percentile", symmetric=True, num_bins=BINS, num_quantized_bins=128,
                                percentile=PERCENTILE, scenario="same")
    ours = _Histogram(float(np.abs(data[0]).max()) / BINS)
    for x in data:
        theirs.collect({"t": [x]})
        ours.add(x)
    lo, hi = ours.range(PERCENTILE)
    want = theirs.compute_collection_result()["t"]
    width = float(np.abs(data[0]).max()) / BINS
    assert abs(hi - float(want[1])) <= 2 * width and abs(lo - float(want[0])) <= 2 * width
    everything = np.abs(np.concatenate([x.reshape(-1) for x in data]))
    assert hi < everything.max()  # a percentile, not the max
    assert (everything > hi).mean() < 1e-4  # a handful of values past it: the bin holding the percentile's share


def test_qdq_graph_takes_these_ranges_for_every_quantized_activation(tiny_onnx, tmp_path):
    """TensorRT's recipe (percentile ranges): each activation's QuantizeLinear has the scale of this module's
    range (symmetric int8: max(|lo|, |hi|) / 127), not MinMax's, and no quantized activation is left out."""
    from mlit_edge.export import smoothing
    from mlit_edge.export.int8_recipe import MATMULS, TENSORRT, float_nodes
    from mlit_edge.export.precision import to_int8
    from mlit_edge.export.ranges import percentile_ranges, quantized_inputs
    from onnx import numpy_helper

    assert TENSORRT.method == "Percentile"
    calib = np.random.default_rng(0).standard_normal((32, 3, 36, 36)).astype(np.float32)
    _, quantized = to_int8(tiny_onnx, tmp_path / "m-int8.onnx", calib, {}, batch=8)
    model, _ = smoothing.apply(onnx.load(str(tiny_onnx)), TENSORRT, calib)
    names = quantized_inputs(model, MATMULS, float_nodes(model, TENSORRT))
    found = percentile_ranges(model, names, [calib[i:i + 8] for i in range(0, 32, 8)])
    inits = {t.name: numpy_helper.to_array(t) for t in quantized.graph.initializer}
    activations = [q for q in quantized.graph.node if q.op_type == "QuantizeLinear" and q.input[0] not in inits]
    assert activations and {q.input[0] for q in activations} <= set(found)
    for q in activations:
        lo, hi = found[q.input[0]]
        assert float(inits[q.input[1]]) == pytest.approx(max(abs(lo), abs(hi)) / 127, rel=1e-5), q.input[0]
