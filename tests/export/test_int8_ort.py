"""The INT8 graph made for ONNX Runtime (int8-ort, issue 49 item 1): static scales fixed by calibration, so an
image's logits do not depend on the images batched with it."""
from pathlib import Path

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

from mlit_edge.artifacts.sidecar import read_sidecar  # noqa: E402
from mlit_edge.export.calibration import Recipe  # noqa: E402
from mlit_edge.export.handoff import HeldOut  # noqa: E402
from mlit_edge.export.precision import float_nodes  # noqa: E402
from mlit_edge.export.variants import Inputs, recipe_line, variant_of  # noqa: E402
from mlit_edge.runtime.runners import OnnxRuntimeRunner  # noqa: E402


def batch_drift(path: Path, images: np.ndarray) -> float:
    """The largest change of any logit between running `images` one at a time, in batches of 8 and all at once."""
    with OnnxRuntimeRunner(path, threads=2) as run:
        def logits(batch: int) -> np.ndarray:
            return np.concatenate([run.infer({"images": images[i:i + batch]})["logits"]
                                   for i in range(0, len(images), batch)])

        whole = logits(len(images))
        return max(float(np.abs(logits(b) - whole).max()) for b in (1, 8))


def test_int8_ort_gives_an_image_the_same_logits_in_any_batch(tiny_onnx, tmp_path):
    """The static graph on the tiny portable export (the fused source's own run is the slow build test's:
    tests/engine/test_build.py); the dynamic graph it replaced fails the same check."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    art = variant_of(tiny_onnx, "int8", Inputs(recipe=Recipe("mnist5k", "train", 64, 0), evaluate=False),
                     runtime="onnxruntime", folder=tmp_path).path
    images = HeldOut("mnist5k").sample(48)
    assert batch_drift(art, images) <= 1e-4
    record = read_sidecar(art)
    assert art.name == "mlit-tiny-int8-ort.onnx" and record["runtime"] == "onnxruntime"
    assert record["quantization"]["mode"] == "static" and record["quantization"]["batch_drift"]["max_abs_logit"] <= 1e-4
    # the shipped recipe smooths the activations first (int8_recipe.ONNXRUNTIME), an exact fp32 rewrite
    smoothing = record["quantization"]["smoothing"]
    assert smoothing["alpha"] == 0.8 and smoothing["layernorms"] > 0 and smoothing["max_abs_logit_change"] <= 1e-5
    line = recipe_line(record)  # what the build prints of it
    assert "in float: router, activation-by-activation matmuls, w2" in line and "smoothed first (a=0.8" in line
    assert "Percentile ranges" in line and "weights GPTQ-rounded (" in line and "x nearest's)" in line
    assert recipe_line({"precision": "fp16"}) == ""
    manifest = (tmp_path / "mlit-tiny-int8-ort.calib.json").read_text()
    assert record["calibration"]["manifest_sha256"] in manifest and record["calibration"]["images"] == 64
    ops = {n.op_type for n in onnx.load(str(art)).graph.node}
    assert {"QuantizeLinear", "DequantizeLinear", "MatMulIntegerToFloat"} <= ops and "DynamicQuantizeLinear" not in ops
    # what ONNX Runtime runs: integer matmuls with float outputs, none through QGemm (export/integer_gemm.py)
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
    opts.optimized_model_filepath = str(tmp_path / "optimized.onnx")
    ort.InferenceSession(str(art), opts, providers=["CPUExecutionProvider"])
    ran = onnx.load(opts.optimized_model_filepath).graph.node
    dequantized = {o for n in ran if n.op_type == "DequantizeLinear" for o in n.output}
    assert "MatMulIntegerToFloat" in {n.op_type for n in ran} and "QGemm" not in {n.op_type for n in ran}
    assert not [n.name for n in ran if n.op_type in ("MatMul", "Gemm") and dequantized & set(n.input)]
    written = onnx.load(str(art)).graph.node  # the MoE's input projection is one matmul per part, not split
    made = {o: n for n in written for o in n.output}
    assert not [n.name for n in written if n.op_type == "Split" and made[n.input[0]].op_type == "Reshape"
                and made[made[n.input[0]].input[0]].op_type == "MatMulIntegerToFloat"]
    # the graph int8-ort was before: each call quantizes its activations from the whole batch's range
    dynamic = tmp_path / "dynamic.onnx"
    model = onnx.load(str(tiny_onnx))
    quantize_dynamic(model, str(dynamic), op_types_to_quantize=["MatMul", "Gemm"], per_channel=True,
                     weight_type=QuantType.QInt8, nodes_to_exclude=sorted(float_nodes(model)))
    assert batch_drift(dynamic, images) > 1e-3


@pytest.mark.parametrize("maker", ["to_int8", "to_int8_ort"])
@pytest.mark.parametrize("calib", [np.zeros((0, 3, 32, 32), np.float32), np.zeros((4, 32, 32), np.float32), [1.0]],
                         ids=["empty", "no channel axis", "a list"])
def test_both_int8_makers_refuse_calibration_data_of_the_wrong_shape_in_one_line(tiny_onnx, tmp_path, maker, calib):
    import mlit_edge.export.precision as precision

    with pytest.raises(ValueError, match=r"^calibration data must be a non-empty \(N, 3, H, W\) float32 array$"):
        getattr(precision, maker)(tiny_onnx, tmp_path / "x.onnx", calib, {})
    assert not (tmp_path / "x.onnx").exists()
