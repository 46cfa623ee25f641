"""engine/dla.py: what `--dla-core` refuses (one line, before any work), and the DLA placement record from
TensorRT's own `can_run_on_DLA`, run here on a stand-in whose names come from NVIDIA's bindings of every
release (engine/data/trt_python_api.json): no TensorRT with a DLA runs on this machine."""
import enum
import re
import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from mlit_edge.engine.dla import check_dla_request, configure_dla, dla_placement, format_placement
from tests.helpers import run_cli

API = json.loads((Path(__file__).parents[2] / "mlit_edge/engine/data/trt_python_api.json").read_text())["branches"]
BRANCHES = ["release/8.5", "release/8.6", "release/10.3", "release/10.13"]


def _stand_in(branch: str, cores: int, refused: set):
    """A tensorrt stand-in with the builder, config, layer and enum names that `branch`'s bindings define;
    its config refuses the layers whose type is in `refused`, as a DLA's `can_run_on_DLA` would."""
    api = API[branch]
    for cls, names in {"Builder": ["num_DLA_cores"], "IBuilderConfig": ["can_run_on_DLA", "DLA_core",
                                                                       "default_device_type", "set_flag"],
                       "INetworkDefinition": ["num_layers", "get_layer"]}.items():
        missing = set(names) - set(api["classes"][cls]["members"])
        assert not missing, f"{branch} {cls} lacks {missing}"
    enums = {name: enum.Enum(name, api["enums"][name]) for name in ("DeviceType", "BuilderFlag", "LayerType")}
    trt = SimpleNamespace(__name__="tensorrt", __version__=branch.split("/")[1], **enums)

    class Config:
        flags: set = set()
        default_device_type = enums["DeviceType"].GPU
        DLA_core = -1

        def set_flag(self, flag):
            self.flags.add(flag)

        def can_run_on_DLA(self, layer):
            return layer.type.name not in refused

        def get_device_type(self, layer):
            return self.default_device_type

    kinds = ["CONVOLUTION", "MATRIX_MULTIPLY", "SOFTMAX", "TOPK", "ELEMENTWISE", "MATRIX_MULTIPLY"]
    layers = [SimpleNamespace(name=f"n{i}", type=enums["LayerType"][k]) for i, k in enumerate(kinds)]
    network = SimpleNamespace(num_layers=len(layers), get_layer=layers.__getitem__)
    return trt, SimpleNamespace(num_DLA_cores=cores), Config(), network


@pytest.mark.parametrize("branch", BRANCHES)
def test_the_placement_is_tensorrts_answer_and_the_fallback_is_counted(branch):
    trt, builder, config, network = _stand_in(branch, 2, {"TOPK", "SOFTMAX"})
    rec = configure_dla(builder, config, network, trt, 1)
    assert config.default_device_type is trt.DeviceType.DLA and config.DLA_core == 1
    assert trt.BuilderFlag.GPU_FALLBACK in config.flags
    rec.update(dla_placement(config, network, trt))
    assert rec["basis"] == "requested" and rec["dla_layers"] == 4 and rec["gpu_fallback_layers"] == 2
    assert [g["type"] for g in rec["gpu_layers"]] == ["SOFTMAX", "TOPK"] and rec["gpu_layers"][1]["name"] == "n3"
    assert format_placement(rec) == ("DLA core 1 (requested; the builder may split further): 4 layers on the DLA, "
                                     "2 on the GPU (SOFTMAX x1, TOPK x1)")


def test_no_dla_core_is_not_measurable_and_a_missing_core_is_named():
    trt, builder, config, network = _stand_in("release/10.13", 0, set())
    with pytest.raises(RuntimeError, match="^DLA placement not measurable here: tensorrt 10.13 has no DLA core"):
        configure_dla(builder, config, network, trt, 0)
    trt, builder, config, network = _stand_in("release/10.13", 1, set())
    with pytest.raises(RuntimeError, match="--dla-core 1: this platform has 1 DLA core"):
        configure_dla(builder, config, network, trt, 1)


@pytest.mark.parametrize("precision,batch,message", [
    ("fp32", 1, "the DLA runs FP16 and INT8 only"),
    ("fp16", None, "needs a static batch"),
])
def test_a_dla_build_it_cannot_run_is_refused(precision, batch, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        check_dla_request(0, precision, batch)
    check_dla_request(None, precision, batch)  # no --dla-core: nothing to refuse
    check_dla_request(0, "fp16", 4)
    check_dla_request(0, "int8", 4)  # calibrated from the fp32 graph where the calibrator exists (dla_int8.py)


def test_build_refuses_int8_on_the_dla_without_implicit_quantization_in_one_line_before_any_work(tmp_path):
    proc = run_cli("build", "--dla-core", "0", "--precision", "int8", "--batch", "1", "--size", "xxs",
                   "--random-weights", "--target", "tensorrt-rtx", "--out", tmp_path / "o", check=False)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode != 0 and len(lines) == 1 and "Traceback" not in proc.stderr
    assert "TensorRT-RTX has no implicit quantization" in lines[0] and "--precision fp16" in lines[0]
    assert not (tmp_path / "o").exists()


def test_the_dla_is_refused_for_onnxruntime_and_a_qdq_graph_is_named_on_any_target(tmp_path):
    """--dla-core on an ONNX Runtime build is refused (it once built an ONNX Runtime artifact and dropped the
    flag), and a Q/DQ --onnx is refused for what it is before the target is weighed."""
    with pytest.raises(ValueError, match="use --target tensorrt, not onnxruntime"):
        check_dla_request(0, "fp16", 1, "onnxruntime")
    check_dla_request(0, "fp16", 1, "tensorrt-rtx")  # builds, then says the placement is not measurable
    from mlit_edge.engine.dla import check_dla_int8

    qdq = tmp_path / "m-int8.onnx"
    qdq.write_bytes(b"\x08\x08" + b"\x12\x0eQuantizeLinear")  # an op type as the protobuf stores it
    with pytest.raises(ValueError, match="is a Q/DQ graph, which the DLA does not run"):
        check_dla_int8("onnxruntime", None, str(qdq))
