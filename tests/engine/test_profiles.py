"""Device profiles (devices/profiles.py): chosen once, refused when they contradict the installed TensorRT,
the weakly typed TensorRT 8.x build really setting EXPLICIT_BATCH, its builder flags and the fp32 pins,
and a plan refused on another Jetson module of the same GPU."""
import logging
from types import SimpleNamespace

import pytest

from mlit_edge.artifacts.schema import ArtifactRecord
from mlit_edge.devices.profiles import (DEFAULT, PROFILES, choose, installed_profile, named_profile, parses,
                                        profile_named)


def test_flags_name_profiles_and_aliases_agree():
    assert named_profile("5.1") is named_profile(tensorrt="8.5") is PROFILES["jetpack-5.1"]
    assert named_profile("6.2").tensorrt == named_profile(tensorrt="10.3").tensorrt == "10.3"
    assert named_profile() is None
    with pytest.raises(ValueError, match="name different TensorRTs"):
        named_profile("5.1", "10.3")
    with pytest.raises(ValueError, match="--jetpack '4.6'"):
        named_profile("4.6")


def test_the_installed_tensorrt_decides_and_a_contradicting_flag_is_refused():
    assert choose(None, "8.5.2.2").name == "jetpack-5.1"
    assert choose(None, "8.6.2.3").name == "jetpack-6.0"
    assert choose(None, "10.3.0.30").name == "jetpack-6.2"
    assert choose(named_profile("6.1"), "10.3.0.30").name == "jetpack-6.1"  # the same TensorRT
    assert choose(None, "10.16.1").name == DEFAULT
    assert choose(named_profile("5.1"), None).name == "jetpack-5.1"  # no TensorRT here: the flag decides
    with pytest.raises(ValueError, match=r"--jetpack 5.1 is TensorRT 8.5, but this machine's TensorRT is 10.3"):
        choose(named_profile("5.1"), "10.3.0.30")
    with pytest.raises(ValueError, match="8.5, 8.6 and 10.x"):
        installed_profile("8.4.1")


def test_an_older_profiles_graph_is_read_by_a_newer_parser_and_not_the_reverse():
    old, mid, new = PROFILES["jetpack-5.1"], PROFILES["jetpack-6.0"], PROFILES["jetpack-6.2"]
    assert parses(old, new) and parses(old, mid) and parses(mid, new)
    assert not parses(new, old) and not parses(new, mid) and not parses(mid, old)  # 6.0 keeps the LayerNorm op
    assert profile_named(None).name == DEFAULT
    with pytest.raises(ValueError, match="does not know"):
        profile_named("jetpack-99")


class _Enum:
    def __init__(self, *names):
        for i, n in enumerate(names):
            setattr(self, n, i)


class _FakeTRT:
    """Just enough of TensorRT 8.5's Python API (release/8.5's bindings: EXPLICIT_BATCH, no STRONGLY_TYPED, no
    LayerType.NORMALIZATION) to run the builder's weakly typed path and record what it set."""

    __name__ = "tensorrt"
    __version__ = "8.5.2.2"

    def __init__(self):
        self.NetworkDefinitionCreationFlag = _Enum("EXPLICIT_BATCH", "EXPLICIT_PRECISION")
        self.BuilderFlag = _Enum("FP16", "INT8", "OBEY_PRECISION_CONSTRAINTS", "GPU_FALLBACK", "TF32")
        self.ProfilingVerbosity = _Enum("LAYER_NAMES_ONLY", "DETAILED", "NONE")
        self.cleared_flags = []
        self.MemoryPoolType = _Enum("WORKSPACE")
        self.DataType = _Enum("FLOAT", "HALF", "INT8", "INT32", "BOOL")
        self.LayerType = _Enum("CONVOLUTION", "SOFTMAX", "ELEMENTWISE", "REDUCE", "TOPK")
        self.set_flags, self.created_with = [], None
        fake = self
        layers = [self._layer(*spec) for spec in (("LayerNorm_0/decomposed/ReduceMean", "REDUCE", "FLOAT"),
                                                  ("LayerNorm_0/decomposed/ReduceMean_7", "REDUCE", "FLOAT"),
                                                  ("node_Gemm_3", "ELEMENTWISE", "FLOAT"),
                                                  ("node_Softmax_5", "SOFTMAX", "FLOAT"),
                                                  ("router_TopK", "TOPK", "INT32"),
                                                  ("node_Gemm_31", "ELEMENTWISE", "FLOAT"))]
        self.layers = layers

        class Network:
            num_layers = len(layers)
            num_inputs = num_outputs = 1

            def get_layer(self, i):
                return layers[i]

            def get_input(self, i):
                return SimpleNamespace(name="images", shape=(-1, 3, 36, 36), dtype="DataType.FLOAT")

            get_output = get_input

        class Config:
            def set_memory_pool_limit(self, pool, size): pass

            def set_flag(self, flag): fake.set_flags.append(flag)

            def clear_flag(self, flag): fake.cleared_flags.append(flag)

            def set_calibration_profile(self, profile): fake.calibration_profile = profile

            def add_optimization_profile(self, p): pass

        class Builder:
            def __init__(self, logger): pass

            def create_network(self, flags):
                fake.created_with = flags
                return Network()

            def create_builder_config(self):
                return Config()

            def create_optimization_profile(self):
                return SimpleNamespace(set_shape=lambda *a: None)

            def build_serialized_network(self, network, config):
                return b"plan"

        class Parser:
            num_errors = 0

            def __init__(self, network, logger): pass

            def parse_from_file(self, path): return True

        self.Builder, self.OnnxParser = Builder, Parser
        # ILogger with NvInferRuntimeBase.h's severities: engine.plan subclasses it to escape what it prints
        self.ILogger = type("ILogger", (), {"INTERNAL_ERROR": 0, "ERROR": 1, "WARNING": 2, "__init__": lambda self: None})
        self.Dims = list

    def _layer(self, name, kind, dtype):
        out = SimpleNamespace(dtype=getattr(self.DataType, dtype), name=f"{name}_out")
        layer = SimpleNamespace(name=name, type=getattr(self.LayerType, kind), num_outputs=1, precision=None,
                                outputs={}, get_output=lambda j: out, num_inputs=0)
        layer.set_output_type = lambda j, t, layer=layer: layer.outputs.__setitem__(j, t)
        return layer


@pytest.mark.parametrize("precision", ["fp16", "int8"])
def test_a_tensorrt_8_build_is_weakly_typed_with_explicit_batch_its_flags_and_fp32_pins(precision, tmp_path):
    from mlit_edge.engine.plan import BuildOptions, build_serialized

    trt = _FakeTRT()
    fp32 = ("LayerNorm_0/decomposed/ReduceMean", "node_Gemm_3", "router_TopK")
    result = build_serialized(tmp_path / "m.onnx", trt, BuildOptions(strongly_typed=False, precision=precision,
                                                                     fp32_layers=fp32))
    assert result["ok"] and trt.created_with == 1 << trt.NetworkDefinitionCreationFlag.EXPLICIT_BATCH
    want = {trt.BuilderFlag.FP16, trt.BuilderFlag.OBEY_PRECISION_CONSTRAINTS} | (
        {trt.BuilderFlag.INT8} if precision == "int8" else set())
    assert set(trt.set_flags) == want
    flags = result["flags"]
    assert flags["strongly_typed"] is False and flags["explicit_batch"] and flags["int8"] == (precision == "int8")
    pinned = {layer.name for layer in trt.layers if layer.precision == trt.DataType.FLOAT}
    # a node's second layer (NODE_7) is pinned with it; node_Gemm_31 is another node; softmax by its type
    assert pinned == {"LayerNorm_0/decomposed/ReduceMean", "LayerNorm_0/decomposed/ReduceMean_7", "node_Gemm_3",
                      "node_Softmax_5", "router_TopK"} and flags["fp32_layers"] == 5
    topk = next(layer for layer in trt.layers if layer.name == "router_TopK")
    assert topk.outputs == {}  # its indices stay integers


def test_a_strongly_typed_build_on_tensorrt_8_is_refused_in_one_line(tmp_path):
    from mlit_edge.engine.plan import BuildOptions, build_serialized

    with pytest.raises(RuntimeError, match="no strongly typed networks") as refused:
        build_serialized(tmp_path / "m.onnx", _FakeTRT(), BuildOptions(strongly_typed=True))
    assert "\n" not in str(refused.value)


def _plan_record(module: str | None) -> ArtifactRecord:
    device = {"gpu_name": "Orin", "compute_capability": "8.7", "module": module}
    return ArtifactRecord.from_json({"artifact": "m.plan", "source_onnx": "m-fp16.onnx", "precision": "fp16",
                                     "target": "tensorrt", "engine": {
                                         "builder": {"module": "tensorrt", "version": "10.3.0.30"}, "device": device}})


def test_a_plan_built_on_another_jetson_module_is_refused_unless_forced(caplog):
    from mlit_edge.devices.trt_env import DeviceEnv, EngineError, check_compatible

    nano = DeviceEnv("tensorrt", "10.3.0.30", "Orin", "8.7", module="NVIDIA Jetson Orin Nano Developer Kit")
    agx = "NVIDIA Jetson AGX Orin Developer Kit"
    with pytest.raises(EngineError) as refused:
        check_compatible(_plan_record(agx), nano)
    line = str(refused.value)
    assert "built on a NVIDIA Jetson AGX Orin" in line and "Orin Nano" in line and "mlit-edge build --onnx" in line
    assert "--force" in line and "\n" not in line
    with caplog.at_level(logging.WARNING, logger="mlit_edge"):
        check_compatible(_plan_record(agx), nano, force=True)
    assert "--force" in caplog.text
    check_compatible(_plan_record(nano.module), nano)  # the same module
    check_compatible(_plan_record(None), nano)  # a plan from before modules were recorded: the GPU decides


def test_a_build_refuses_an_onnx_that_its_profiles_parser_cannot_read(tiny_onnx, tmp_path):
    """A TensorRT 10 graph (opset 18, LayerNormalization) built for JetPack 5.1's TensorRT 8.5: one line that
    names both profiles and the export that fixes it, before any work."""
    pytest.importorskip("tensorrt_rtx")
    from mlit_edge.engine.build import BuildRequest, run_build

    with pytest.raises(ValueError) as refused:
        run_build(BuildRequest(onnx=str(tiny_onnx), precision="fp32", target="tensorrt-rtx", jetpack="5.1",
                               out=str(tmp_path / "out")))
    line = str(refused.value)
    assert "exported for tensorrt-10" in line and "jetpack-5.1" in line and "mlit-edge export" in line
    assert "--jetpack 5.1" in line and "\n" not in line
    assert not (tmp_path / "out").exists()
    with pytest.raises(ValueError, match="the onnxruntime artifact takes none"):
        run_build(BuildRequest(onnx=str(tiny_onnx), precision="fp32", target="onnxruntime", jetpack="6.2",
                               out=str(tmp_path / "ort")))


@pytest.mark.slow
def test_an_export_for_jetpack_5_1_is_exact_checks_against_8_5_and_builds_with_tensorrt_rtx(tmp_path):
    """The 5.1 export end to end: opset 17, no LayerNormalization, within 1e-5 of PyTorch with the same experts
    in every layer, clean against onnx-tensorrt 8.5-GA's table; the fp16 variant records the nodes a TensorRT 8.5
    build pins; TensorRT-RTX (a newer parser) builds the 5.1 graph, and the plan records the 5.1 profile."""
    import numpy as np
    import onnx

    from mlit_edge.engine.check import check
    from mlit_edge.export.pipeline import ExportRequest, run_export
    from mlit_edge.export.source import load_for_export
    from mlit_edge.runtime.runners import OnnxRuntimeRunner
    from mlit_edge.artifacts.sidecar import read_sidecar

    made = run_export(ExportRequest(size="xxs", random_weights=True, out=str(tmp_path / "m.onnx"), probe=True,
                                    precisions=("fp32", "fp16"), jetpack="5.1", evaluate=False))
    fp32, fp16 = made
    graph = onnx.load(str(fp32))
    assert next(o.version for o in graph.opset_import if o.domain in ("", "ai.onnx")) == 17
    assert not [n for n in graph.graph.node if n.op_type == "LayerNormalization"]
    record = read_sidecar(fp32)
    assert record["profile"]["name"] == "jetpack-5.1" and record["parser_graph"]["layernorm"] == "decomposed"
    model, _ = load_for_export(None, "xxs", 10, random_weights=True)
    x = np.random.default_rng(0).standard_normal((8, 3, 36, 36), np.float32)
    import torch

    with torch.no_grad():
        want, aux = model(torch.from_numpy(x), return_aux=True)
    with OnnxRuntimeRunner(fp32) as run:
        got = run.infer({"images": x})
    assert np.abs(got["logits"] - want.numpy()).max() <= 1e-5
    for i, r in enumerate(aux.routings):  # the last layer routes the dummy token alone (export/last_token.py)
        routes = got[f"experts_{i}"]
        ref = np.sort(r.clean_i.view(8, -1, r.clean_i.shape[-1]).numpy()[:, -routes.shape[1]:], -1)
        assert routes.shape[1] == (1 if i == len(aux.routings) - 1 else 145), f"layer {i}"
        assert np.array_equal(np.sort(routes, -1), ref), f"layer {i}"
    rep = check(fp32, build=False, profile=named_profile("5.1"))
    assert rep.ok and rep.profile == "jetpack-5.1" and "8.5-GA" in rep.table, rep.problems
    # the check bites: one LayerNormalization injected into the 5.1 graph fails it, naming the op
    from onnx import TensorProto, helper, numpy_helper

    classes = graph.graph.output[0].type.tensor_type.shape.dim[-1].dim_value
    graph.graph.initializer.extend([numpy_helper.from_array(np.ones(classes, np.float32), "ln_scale")])
    graph.graph.node.append(helper.make_node("LayerNormalization", ["logits", "ln_scale"], ["normed"], name="ln"))
    graph.graph.output.append(helper.make_tensor_value_info("normed", TensorProto.FLOAT, None))
    onnx.save(graph, str(tmp_path / "injected.onnx"))
    bad = check(tmp_path / "injected.onnx", build=False, profile=named_profile("5.1"))
    assert not bad.ok and [p for p in bad.problems if p.startswith("LayerNormalization x1: TensorRT 8.5")], bad.problems
    assert len(read_sidecar(fp16)["fp32_layers"]) > 19 * 9  # every node of the 19 decomposed LayerNorms, and more
    pytest.importorskip("tensorrt_rtx")
    from mlit_edge.engine.build import BuildRequest, run_build

    built = run_build(BuildRequest(onnx=str(fp32), precision="fp32", target="tensorrt-rtx", out=str(tmp_path / "p"),
                                   evaluate=False))
    assert built.record.profile == "jetpack-5.1" and built.record.to_json()["engine"]["flags"]["strongly_typed"]


def test_an_export_on_a_jetson_takes_its_tensorrts_profile(monkeypatch, tmp_path):
    """On a Jetson the installed TensorRT decides the export's profile too; a flag naming another is refused."""
    from mlit_edge.export.requests import ExportRequest
    from mlit_edge.export.resolve import resolve_plan
    from mlit_edge.export.source import Source

    source = Source(ArtifactRecord.from_json({"model": {"size": "xxs"}}))
    assert resolve_plan(ExportRequest(out=str(tmp_path / "m.onnx")), source).device.name == DEFAULT  # a workstation
    monkeypatch.setattr("mlit_edge.export.resolve.jetson_tensorrt", lambda: "8.6.2.3")  # where resolve reads it
    plan = resolve_plan(ExportRequest(out=str(tmp_path / "m.onnx")), source)
    assert plan.device.name == "jetpack-6.0" and plan.opset == 17
    with pytest.raises(ValueError, match="this machine's TensorRT is 8.6.2.3"):
        resolve_plan(ExportRequest(out=str(tmp_path / "m.onnx"), jetpack="6.2"), source)


def test_check_builds_the_way_the_installed_tensorrt_builds(tmp_path):
    """`mlit-edge check` on a Jetson with TensorRT 8.5 builds weakly typed (a strongly typed try would be refused
    there), with the precision's flags and the sidecar's fp32 layers."""
    from mlit_edge.engine.check import trt_build

    trt = _FakeTRT()
    result = trt_build(tmp_path / "m.onnx", trt, precision="fp16", fp32_layers=("node_Gemm_3",))
    assert result["ok"] and result["flags"]["strongly_typed"] is False
    assert trt.created_with == 1 << trt.NetworkDefinitionCreationFlag.EXPLICIT_BATCH
    assert trt.BuilderFlag.FP16 in trt.set_flags
