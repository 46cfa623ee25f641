"""engine/dla_int8.py: the calibrated INT8 DLA build, on a stand-in whose names come from NVIDIA's bindings
(engine/data/trt_python_api.json). No TensorRT with a DLA runs here, so the real build is not exercised."""
import ctypes
import enum
import json
import re
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from mlit_edge.engine.dla import check_dla_int8
from mlit_edge.engine.dla_int8 import (CALIBRATOR, cache_path, calibration_record, configure_implicit_int8,
                                       make_calibrator, pinned_to_gpu)

API = json.loads((Path(__file__).parents[2] / "mlit_edge/engine/data/trt_python_api.json").read_text())["branches"]
BRANCHES = ["release/8.5", "release/8.6", "release/10.3", "release/10.13"]


class FakeCudart:
    """cuda-python's runtime as the calibrator calls it: a device buffer is a bytearray, copies are real."""

    cudaMemcpyKind = SimpleNamespace(cudaMemcpyHostToDevice="h2d")

    def __init__(self):
        self.memory, self.freed = {}, []

    def cudaMalloc(self, n):
        ptr = 0x1000 * (len(self.memory) + 1)
        self.memory[ptr] = bytearray(n)
        return 0, ptr

    def cudaMemcpy(self, dst, src, n, kind):
        assert kind == "h2d" and len(self.memory[dst]) == n
        self.memory[dst][:] = ctypes.string_at(src, n)
        return (0,)

    def cudaFree(self, ptr):
        self.freed.append(ptr)
        return (0,)


def _trt(branch):
    api = API[branch]
    assert CALIBRATOR in api["classes"], f"{branch} lacks {CALIBRATOR}"
    members = set(api["classes"][CALIBRATOR]["members"])
    assert {"get_batch", "get_batch_size", "read_calibration_cache", "write_calibration_cache"} <= members
    assert {"int8_calibrator", "set_device_type", "set_flag"} <= set(api["classes"]["IBuilderConfig"]["members"])
    enums = {name: enum.Enum(name, api["enums"][name]) for name in ("DeviceType", "BuilderFlag")}
    base = type(CALIBRATOR, (), {"__init__": lambda self: None})
    return SimpleNamespace(__name__="tensorrt", __version__=branch.split("/")[1], **{CALIBRATOR: base}, **enums)


def _images(n=10):
    return np.arange(n * 3 * 4 * 4, dtype=np.float32).reshape(n, 3, 4, 4)


@pytest.mark.parametrize("branch", BRANCHES)
def test_the_calibrator_hands_out_the_manifest_images_in_order_in_the_static_batch_then_none(branch, tmp_path):
    rt, images = FakeCudart(), _images(10)
    cal = make_calibrator(_trt(branch), images, 4, tmp_path / "c.calib", cudart=rt)
    assert cal.get_batch_size() == 4
    seen = []
    for _ in range(2):
        (ptr,) = cal.get_batch(["input"])
        seen.append(np.frombuffer(bytes(rt.memory[ptr]), np.float32).reshape(4, 3, 4, 4))
    assert cal.get_batch(["input"]) is None  # 10 images: two whole batches of 4, the remainder left out
    np.testing.assert_array_equal(np.concatenate(seen), images[:8])
    assert len(rt.memory) == 1  # one device buffer for every batch
    cal.close()
    assert rt.freed == [next(iter(rt.memory))]


def test_too_few_images_for_one_batch_is_one_line(tmp_path):
    with pytest.raises(ValueError, match="^3 calibration images do not fill one batch of 4"):
        make_calibrator(_trt("release/10.13"), _images(3), 4, tmp_path / "c", cudart=FakeCudart())


def test_the_cache_is_written_reused_when_the_keys_match_and_ignored_when_either_changes(tmp_path):
    trt, plan = _trt("release/8.6"), tmp_path / "m-int8.plan"
    cache = cache_path(plan, "manifest-a", "onnx-a")
    assert cache.parent == tmp_path and cache.name.startswith("m-int8.plan.")
    cal = make_calibrator(trt, _images(4), 4, cache, cudart=FakeCudart())
    assert cal.read_calibration_cache() is None and not cal.reused
    cal.write_calibration_cache(memoryview(b"TRT-cache"))
    assert cache.read_bytes() == b"TRT-cache" and cal.written
    again = make_calibrator(trt, _images(4), 4, cache_path(plan, "manifest-a", "onnx-a"), cudart=FakeCudart())
    assert again.reused and again.read_calibration_cache() == b"TRT-cache"
    for other in (cache_path(plan, "manifest-b", "onnx-a"), cache_path(plan, "manifest-a", "onnx-b")):
        stale = make_calibrator(trt, _images(4), 4, other, cudart=FakeCudart())
        assert not stale.reused and stale.read_calibration_cache() is None
    rec = calibration_record({"sha256": "manifest-a", "images": 4}, cache, 4, True)
    assert rec["calibrator"] == "IInt8EntropyCalibrator2" and rec["manifest_sha256"] == "manifest-a"
    assert rec["cache_sha256"] == __import__("hashlib").sha256(b"TRT-cache").hexdigest() and rec["images"] == 4


@pytest.mark.parametrize("branch", BRANCHES)
def test_the_config_gets_int8_fp16_and_the_calibrator_and_pins_run_on_the_gpu(branch):
    trt = _trt(branch)
    config = SimpleNamespace(flags=set(), devices={}, int8_calibrator=None)
    config.set_flag = config.flags.add
    config.set_device_type = lambda layer, kind: config.devices.__setitem__(layer.name, kind)
    cal = object()
    rec = configure_implicit_int8(config, trt, cal)
    assert config.flags == {trt.BuilderFlag.INT8, trt.BuilderFlag.FP16} and config.int8_calibrator is cal
    assert rec == {"int8": True, "fp16": True, "implicit_quantization": True, "calibrator": CALIBRATOR}
    layers = [SimpleNamespace(name=f"n{i}") for i in range(4)]
    network = SimpleNamespace(num_layers=4, get_layer=layers.__getitem__)
    assert pinned_to_gpu(config, network, trt, {"n1", "n3"}.__contains__) == ["n1", "n3"]
    assert config.devices == {"n1": trt.DeviceType.GPU, "n3": trt.DeviceType.GPU}


def test_the_weakly_typed_network_has_no_strongly_typed_flag():
    from mlit_edge.engine.plan import network_flags

    kinds = enum.IntEnum("NetworkDefinitionCreationFlag",
                         API["release/10.13"]["enums"]["NetworkDefinitionCreationFlag"], start=0)
    flags = network_flags(SimpleNamespace(NetworkDefinitionCreationFlag=kinds), False)
    assert flags == 1 << int(kinds.EXPLICIT_BATCH) and not flags & (1 << int(kinds.STRONGLY_TYPED))


def test_no_implicit_quantization_and_a_qdq_onnx_are_refused_in_one_line(tmp_path):
    with pytest.raises(ValueError, match="^--dla-core with --precision int8: TensorRT-RTX has no implicit quant"):
        check_dla_int8("tensorrt-rtx", None, None)
    with pytest.raises(ValueError, match="^--dla-core with --precision int8 builds through TensorRT's ONNX parser"):
        check_dla_int8("tensorrt", None, None, "torch-tensorrt")
    gone = SimpleNamespace(__name__="tensorrt", __version__="11.0")  # a release whose bindings lack it
    with pytest.raises(ValueError, match=re.escape("tensorrt 11.0 has no IInt8EntropyCalibrator2")) as e:
        check_dla_int8("tensorrt", gone, None)
    assert "--precision fp16" in str(e.value) and "\n" not in str(e.value)
    qdq, fp32 = tmp_path / "m-int8.onnx", tmp_path / "m.onnx"
    qdq.write_bytes(b"\x08\x07:\x12QuantizeLinear\x12DequantizeLinear")
    fp32.write_bytes(b"\x08\x07:\x12MatMul\x12Softmax")
    with pytest.raises(ValueError, match=re.escape("is a Q/DQ graph, which the DLA does not run (NVIDIA/TensorRT#2222)")):
        check_dla_int8("tensorrt", _trt("release/10.3"), str(qdq))
    check_dla_int8("tensorrt", _trt("release/10.3"), str(fp32))  # the fp32 graph is what it calibrates


def test_build_serialized_makes_a_weakly_typed_calibrated_dla_engine_with_the_pins_on_the_gpu(tmp_path):
    """plan.build_serialized end to end on test_profiles' TensorRT stand-in, given a DLA: the flags really set."""
    from mlit_edge.engine.plan import BuildOptions, build_serialized
    from tests.engine.test_profiles import _FakeTRT, _Enum

    trt = _FakeTRT()
    trt.DeviceType = _Enum("GPU", "DLA")
    fake_builder, devices, made = trt.Builder, {}, []

    class Builder(fake_builder):
        num_DLA_cores = 2

        def create_builder_config(self):
            config = super().create_builder_config()
            config.can_run_on_DLA = lambda layer: layer.type != trt.LayerType.TOPK
            config.set_device_type = lambda layer, kind: devices.__setitem__(layer.name, kind)
            config.get_device_type = lambda layer: devices.get(layer.name, config.default_device_type)
            made.append(config)
            return config

    trt.Builder, cal = Builder, object()
    result = build_serialized(tmp_path / "m.onnx", trt, BuildOptions(
        dla_core=1, strongly_typed=False, precision="int8", fp32_layers=("node_Gemm_3",), calibrator=cal))
    assert result["ok"] and trt.created_with == 1 << trt.NetworkDefinitionCreationFlag.EXPLICIT_BATCH
    assert result["flags"]["calibration_profile"] == {"input": "images", "batch": 8}  # dynamic input: set
    assert set(trt.set_flags) == {trt.BuilderFlag.INT8, trt.BuilderFlag.FP16, trt.BuilderFlag.GPU_FALLBACK,
                                  trt.BuilderFlag.OBEY_PRECISION_CONSTRAINTS}
    (config,) = made
    assert config.int8_calibrator is cal and config.default_device_type == trt.DeviceType.DLA and config.DLA_core == 1
    flags = result["flags"]
    assert flags["strongly_typed"] is False and flags["calibrator"] == CALIBRATOR and flags["implicit_quantization"]
    # the pinned layers (the named Gemm, softmax by its type) run fp32 on the GPU; TopK falls back by TensorRT's word
    assert devices == {"node_Gemm_3": trt.DeviceType.GPU, "node_Softmax_5": trt.DeviceType.GPU}
    assert flags["dla"]["fp32_gpu_layers"] == ["node_Gemm_3", "node_Softmax_5"]
    # the placement is read after the pins moved: they count on the GPU side, never on both (item 8 of issue 45)
    assert [g["name"] for g in flags["dla"]["gpu_layers"]] == ["node_Gemm_3", "node_Softmax_5", "router_TopK"]
    assert flags["dla"]["dla_layers"] == 3 and flags["dla"]["basis"] == "requested"


def test_run_build_calibrates_the_fp32_onnx_on_the_recipes_images_and_records_it(tiny_onnx, monkeypatch, tmp_path):
    """`mlit-edge build --onnx FP32 --dla-core 0 --precision int8` through run_build, TensorRT and CUDA stood in:
    the engine is built from the fp32 graph, fed exactly the manifest's images, and the sidecar says so."""
    import mlit_edge.devices.trt_env as trt_env
    import mlit_edge.engine.dla_int8 as dla_int8
    from mlit_edge.engine import build as build_module
    from mlit_edge.engine.build import BuildRequest, run_build
    from mlit_edge.export.calibration import calibration_set, resolve_recipe

    trt, rt, fed = _trt("release/10.3"), FakeCudart(), []
    monkeypatch.setattr(trt_env, "_import", lambda name: trt if name == "tensorrt" else __import__(name))
    monkeypatch.setattr(dla_int8, "get_cudart", lambda: rt)  # the calibrator's, where make_calibrator calls it

    def build(onnx, module, opts):
        cal = opts.calibrator
        assert Path(onnx) == tiny_onnx and not opts.strongly_typed and opts.dla_core == 0
        while (ptrs := cal.get_batch(["images"])) is not None:
            fed.append(np.frombuffer(bytes(rt.memory[ptrs[0]]), np.float32).copy())
        cal.write_calibration_cache(b"cache")
        return {"module": "tensorrt", "version": "10.3", "ok": True, "engine": b"plan", "layers": 1, "build_s": 0.0,
                "flags": {"strongly_typed": False, "dla_core": 0}, "io": {}}

    monkeypatch.setattr(build_module, "build_serialized", build)
    built = run_build(BuildRequest(onnx=str(tiny_onnx), precision="int8", target="tensorrt", dla_core=0, batch=4,
                                   calib_n=8, out=str(tmp_path / "o"), evaluate=False))
    want = calibration_set(resolve_recipe(None, 8, 0, built.record.dataset))
    np.testing.assert_array_equal(np.concatenate(fed), want.images.reshape(-1))
    calib = built.record.to_json()["engine"]["flags"]["calibration"]
    assert built.artifact.name.endswith("-int8.plan") and built.record.precision == "int8"
    assert calib["manifest_sha256"] == want.manifest["sha256"] == built.record.calibration_sha256
    assert calib["images"] == 8
    assert calib["cache_sha256"] == __import__("hashlib").sha256(b"cache").hexdigest()
