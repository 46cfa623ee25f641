"""Each JetPack's TensorRT, checked against that version's own sources: the ONNX parser's operator table
(onnx-tensorrt docs/operators.md) and the Python API's names (NVIDIA/TensorRT python/src), as committed in
mlit_edge/engine/data by tools/gen_trt_sources.py. The generator's parsers are tested here on inline
samples, so none of this needs the fetched repositories."""
from __future__ import annotations

import ast
import importlib.util
import json
import os
import re
import subprocess
import textwrap
from pathlib import Path

import pytest

from mlit_edge.engine import trt_sources
from mlit_edge.engine.trt_sources import api_names, op_table
from tests.helpers import ROOT

DATA = ROOT / "mlit_edge" / "engine" / "data"
SHA = re.compile(r"^[0-9a-f]{40}$")


def _generator():
    spec = importlib.util.spec_from_file_location("gen_trt_sources", ROOT / "tools" / "gen_trt_sources.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


gen = _generator()


# ------------------------------------------------------------------------------------------ op tables

def test_85_has_no_layer_normalization_and_stops_at_opset_17():
    t = op_table("8.5.2.2")  # JetPack 5.1.x
    assert t.branch == "8.5-GA" and t.max_opset == 17 and t.min_opset is None
    assert "LayerNormalization" in t and not t.supported("LayerNormalization")
    assert t.supported("Softmax") and t.supported("MatMul") and t.supported("Erf")


def test_85_topk_wants_k_as_an_initializer():
    assert op_table("8.5").restrictions("TopK") == "`K` input must be an initializer"
    assert op_table("8.5").dtypes("TopK") == ("FP32", "FP16")


def test_86_imports_layer_normalization_in_fp32_and_fp16():
    t = op_table("8.6.2")  # JetPack 6.0
    assert t.branch == "8.6-GA" and t.max_opset == 17
    assert t.supported("LayerNormalization") and t.dtypes("LayerNormalization") == ("FP32", "FP16")
    assert t.restrictions("LayerNormalization") == ""
    assert t.restrictions("TopK") == ""  # the initializer rule is gone in 8.6


@pytest.mark.parametrize("version", ["10.0", "10.3.0.30", "10.13.3"])
def test_10x_imports_layer_normalization(version):
    t = op_table(version)
    assert t.supported("LayerNormalization") and "BF16" in t.dtypes("LayerNormalization")
    assert (t.min_opset, t.max_opset) == (9, 20)


def test_10x_without_its_own_ga_branch_takes_the_nearest_below_and_says_so():
    t = op_table("10.3.0.30")  # JetPack 6.1/6.2
    assert t.branch == "10.1-GA"
    assert "10.1-GA" in t.source and t.commit in t.source and "nearest" in t.source
    assert t.restrictions("TopK") == "`sorted` must be 1. `K` input must be less than 3840."
    assert op_table("10.0.1").branch == "10.0-GA"
    assert op_table("10.13.3").branch == trt_sources.covered_versions()["onnx_trt_ops"][-1]  # the newest GA


def test_an_operator_the_page_does_not_list_is_not_supported():
    assert not op_table("8.5").supported("Attention")  # opset 23; newer than every table here
    assert op_table("8.5").restrictions("Attention") == "" and op_table("8.5").dtypes("Attention") == ()


# ------------------------------------------------------------------------------------------ API names

@pytest.mark.parametrize("version,strongly_typed", [("8.5", False), ("8.6", False), ("10.3", True), ("10.13", True)])
def test_network_creation_flags(version, strongly_typed):
    a = api_names(version)
    assert a.has("NetworkDefinitionCreationFlag", "EXPLICIT_BATCH")
    assert a.has("NetworkDefinitionCreationFlag", "STRONGLY_TYPED") is strongly_typed


@pytest.mark.parametrize("version", ["8.5", "8.6", "10.3", "10.13"])
def test_the_builder_names_the_engine_code_calls(version):
    a = api_names(version)
    for flag in ("FP16", "INT8", "OBEY_PRECISION_CONSTRAINTS", "GPU_FALLBACK"):
        assert a.has("BuilderFlag", flag), flag
    for member in ("set_flag", "default_device_type", "DLA_core", "can_run_on_DLA", "set_memory_pool_limit"):
        assert a.has("IBuilderConfig", member), member
    assert a.has("ILayer", "precision") and a.has("ILayer", "set_output_type")
    assert a.has("IConvolutionLayer", "precision")  # inherited through the binding's base, ILayer
    assert a.has("IInt8EntropyCalibrator2") and a.has("IInt8EntropyCalibrator2", "get_batch")
    assert a.has("ILogger.Severity", "WARNING") and a.has("ILogger", "WARNING")  # .export_values()
    assert not a.has("IBuilderConfig", "no_such_member") and not a.has("NoSuchClass")


def test_what_10x_removed_and_deprecated():
    assert api_names("8.5").has("IBuilderConfig", "max_workspace_size")
    assert not api_names("10.3").has("IBuilderConfig", "max_workspace_size")
    assert api_names("8.5").has("BuilderFlag", "STRICT_TYPES") and not api_names("10.3").has("BuilderFlag", "STRICT_TYPES")
    assert api_names("8.5").deprecated("IBuilderConfig", "max_workspace_size") == "get_memory_pool_limit"
    assert api_names("10.3").deprecated("ILayer", "precision") is None
    assert "10.12" in api_names("10.13").deprecated("IConvolutionLayer", "set_output_type")


def test_api_branch_rule():
    assert api_names("8.6.2.3").branch == "release/8.6"
    assert api_names("10.3.0.30").branch == "release/10.3"
    assert api_names("10.13.3.9").branch == "release/10.13"
    a = api_names("10.7")
    assert a.branch == "release/10.3" and "nearest" in a.source and a.commit in a.source


@pytest.mark.parametrize("version", ["9.3", "7.1.3", "8.4", "11.0"])
@pytest.mark.parametrize("lookup", [op_table, api_names])
def test_versions_without_data_are_a_clear_error(version, lookup):
    with pytest.raises(ValueError, match=re.escape(version)) as e:
        lookup(version)
    assert "8.5" in str(e.value) and "8.6" in str(e.value) and "10." in str(e.value)


def test_a_non_version_is_an_error():
    with pytest.raises(ValueError, match="not a TensorRT version"):
        op_table("latest")


# ------------------------------------------------------------------------------------------ the data

def _branches(name: str) -> dict:
    return json.loads((DATA / name).read_text())["branches"]


def test_every_branch_records_its_full_commit():
    ops, api = _branches("onnx_trt_ops.json"), _branches("trt_python_api.json")
    assert {"8.5-GA", "8.6-GA", "10.0-GA", "10.1-GA"} <= set(ops)
    assert {"release/8.5", "release/8.6", "release/10.3", "release/10.13"} <= set(api)
    for branch, entry in {**ops, **api}.items():
        assert SHA.match(entry["commit"]), (branch, entry["commit"])
        assert entry["branch"] == branch
    for entry in api.values():
        assert SHA.match(entry["onnx_parser_pin"]["commit"])
    assert all(len(e["ops"]) >= gen.MIN_OPS for e in ops.values())


def test_the_data_ships_with_the_package():
    assert '"engine/data/*.json"' in (ROOT / "pyproject.toml").read_text()
    proc = subprocess.run(["git", "check-ignore", "-q", str(DATA / "onnx_trt_ops.json")], cwd=ROOT)
    assert proc.returncode == 1, "engine/data is git-ignored: the generated files would not be committed"


# (version, op or (class, member)) -> the answer on this Python: both answers present, so that a module that always
# says False (or True) under 3.8 cannot pass
PY38_QUERIES = [("op", "8.5", "LayerNormalization", False), ("op", "10.0", "LayerNormalization", True),
                ("op", "8.5", "Relu", True), ("api", "8.6", ("NetworkDefinitionCreationFlag", "STRONGLY_TYPED"), False),
                ("api", "10.3", ("NetworkDefinitionCreationFlag", "STRONGLY_TYPED"), True)]


def test_the_module_is_python_38_syntax(monkeypatch):
    """JetPack 5's python3 is 3.8: the module must parse (and, where a 3.8 is here, run) there."""
    path = Path(trt_sources.__file__)
    ast.parse(path.read_text(), feature_version=(3, 8))
    for kind, version, name, want in PY38_QUERIES:  # the answers the 3.8 run must give, held on this Python too
        got = op_table(version).supported(name) if kind == "op" else api_names(version).has(*name)
        assert got is want, (kind, version, name, got)
    from tools.fetch_test_deps import find_python38  # MLIT_PYTHON38, `python3.8` on PATH or pyenv's 3.8.x

    if os.environ.get("PYTHON38") and not os.environ.get("MLIT_PYTHON38"):  # the name this test once read
        monkeypatch.setenv("MLIT_PYTHON38", os.environ["PYTHON38"])
    py38 = find_python38()  # one that runs and is 3.8: a pyenv shim without a 3.8 behind it, or another Python, is not
    if py38 is None:
        pytest.skip("no Python 3.8 interpreter here (MLIT_PYTHON38=/path/to/python3.8 names one): the module was only "
                    "parsed with feature_version=(3, 8), not run")
    code = textwrap.dedent(f"""
        import importlib.util as u, json, sys
        s = u.spec_from_file_location("t", {str(path)!r}); m = u.module_from_spec(s); s.loader.exec_module(m)
        answers = [m.op_table(v).supported(n) if k == "op" else m.api_names(v).has(*n)
                   for k, v, n, _ in {PY38_QUERIES!r}]
        print(json.dumps({{"python": list(sys.version_info[:2]), "answers": answers}}))
    """)
    proc = subprocess.run([py38, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["python"] == [3, 8], (py38, out)
    assert out["answers"] == [want for *_, want in PY38_QUERIES], out


@pytest.mark.skipif(not (os.environ.get("TRT_SOURCES_TENSORRT") and os.environ.get("TRT_SOURCES_ONNX_TENSORRT")),
                    reason="set TRT_SOURCES_TENSORRT / TRT_SOURCES_ONNX_TENSORRT to the fetched git dirs")
def test_the_committed_data_is_what_the_generator_makes(tmp_path):
    rc = gen.main(["--tensorrt", os.environ["TRT_SOURCES_TENSORRT"],
                   "--onnx-tensorrt", os.environ["TRT_SOURCES_ONNX_TENSORRT"], "--out", str(tmp_path)])
    assert rc == 0
    for name in ("onnx_trt_ops.json", "trt_python_api.json"):
        assert (tmp_path / name).read_text() == (DATA / name).read_text(), name


# ------------------------------------------------------------------------------- the generator's parsers

MD_8X = """# Supported ONNX Operators

TensorRT 8.5 supports operators up to Opset 17. Latest information [here](x)

| Operator                  | Supported  | Supported Types | Restrictions                  |
|---------------------------|------------|-----------------|-------------------------------|
| Abs                       | Y          | FP32, FP16, INT32 |
| LayerNormalization        | N          |
| TopK                      | Y          | FP32, FP16 | `K` input must be an initializer
| Resize                    | Y          | FP32 | modes: `a` \\| `b` |

Text after the table | not a row
"""

MD_10X = MD_8X.replace("up to Opset 17", "in the inclusive range of opset 9 to opset 20").replace("8.5", "10.0")


def test_operators_md_parses_both_formats():
    t = gen.parse_operators_md(MD_8X)
    assert (t["min_opset"], t["max_opset"], t["doc_tensorrt_version"]) == (None, 17, "8.5")
    assert set(t["ops"]) == {"Abs", "LayerNormalization", "TopK", "Resize"}  # the table ends at its last row
    assert t["ops"]["LayerNormalization"] == {"supported": False, "dtypes": [], "restrictions": ""}
    assert t["ops"]["TopK"]["restrictions"] == "`K` input must be an initializer"
    assert t["ops"]["Abs"]["dtypes"] == ["FP32", "FP16", "INT32"]
    assert t["ops"]["Resize"]["restrictions"] == "modes: `a` | `b`"  # an escaped pipe stays in its cell
    t10 = gen.parse_operators_md(MD_10X)
    assert (t10["min_opset"], t10["max_opset"]) == (9, 20)


@pytest.mark.parametrize("broken,why", [
    (MD_8X.replace("up to Opset 17", "up to the latest opset"), "states no opset"),
    (MD_8X.replace("| Operator ", "| Op "), "no table"),
    (MD_8X.replace("| Abs                       | Y", "| Abs                       | maybe"), "does not parse"),
])
def test_operators_md_that_does_not_parse_fails_loudly(broken, why):
    with pytest.raises(gen.SourceError, match=why):
        gen.parse_operators_md(broken)


def _repo(path: Path, branches: dict[str, dict[str, str]]) -> Path:
    """A throwaway git repository with one commit per branch holding the given files."""
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@t"}
    subprocess.run(["git", "init", "-q", str(path)], check=True, env=env)
    for branch, files in branches.items():
        subprocess.run(["git", "-C", str(path), "checkout", "-q", "--orphan", branch], check=True, env=env)
        subprocess.run(["git", "-C", str(path), "rm", "-rq", "--cached", "--ignore-unmatch", "."], check=True, env=env)
        for name, text in files.items():
            (path / name).parent.mkdir(parents=True, exist_ok=True)
            (path / name).write_text(text)
            subprocess.run(["git", "-C", str(path), "add", name], check=True, env=env)
        subprocess.run(["git", "-C", str(path), "commit", "-qm", branch], check=True, env=env)
    return path / ".git"


def test_a_table_of_fewer_than_100_operators_stops_the_generator(tmp_path, capsys):
    onnx = _repo(tmp_path / "onnx", {b: {"docs/operators.md": MD_8X} for b in ("8.5-GA", "8.6-GA", "10.0-GA")})
    with pytest.raises(gen.SourceError, match=r"8\.5-GA \([0-9a-f]{40}\) docs/operators.md: only 4 operators"):
        gen.gen_ops(onnx)
    assert gen.main(["--tensorrt", str(onnx), "--onnx-tensorrt", str(onnx), "--out", str(tmp_path / "out")]) == 1
    assert "only 4 operators" in capsys.readouterr().err and not (tmp_path / "out").exists()


CPP = textwrap.dedent(r'''
    // py::class_<Ghost>(m, "Ghost").def("ghost", &g);   a comment is not a binding
    void bindCore(py::module& m)
    {
        py::class_<ILayer, std::unique_ptr<ILayer, py::nodelete>>(m, "ILayer", ILayerDoc::descr, py::module_local())
            .def_property("name", &ILayer::getName, [](ILayer& self, char const* n) { self.setName(n); })
            .def_property("precision", &ILayer::getPrecision,
                utils::deprecateMember(&ILayer::setPrecision, "Deprecated in TensorRT 10.12. " "Use strong typing."))
            .def("set_output_type", &ILayer::setOutputType, "index"_a, "dtype"_a, /* "fake(" */ ILayerDoc::x)
            .def_property_readonly("num_inputs", &ILayer::getNbInputs);

        py::class_<IConvolutionLayer, ILayer, std::unique_ptr<IConvolutionLayer, py::nodelete>>(
            m, "IConvolutionLayer", py::module_local())
            .def_property("kernel_size_nd", &IConvolutionLayer::getKernelSizeNd, &IConvolutionLayer::setKernelSizeNd)
            .def("__repr__", [](IConvolutionLayer& self) { return std::string("conv(") + ", )"; });

        py::class_<ILogger, PyLogger> baseLoggerBinding{m, "ILogger", py::module_local()};
        py::enum_<ILogger::Severity>(baseLoggerBinding, "Severity", py::arithmetic())
            .value("ERROR", ILogger::Severity::kERROR)
            .value(
                "WARNING", ILogger::Severity::kWARNING, SeverityDoc::warning)
            .export_values();
        baseLoggerBinding.def(py::init<>()).def("log", &ILogger::log, "severity"_a, "msg"_a);

    #if EXPORT_ALL_BINDINGS
        py::enum_<NetworkDefinitionCreationFlag>(m, "NetworkDefinitionCreationFlag", py::arithmetic{})
            .value("EXPLICIT_BATCH", NetworkDefinitionCreationFlag::kEXPLICIT_BATCH);
    #endif
    #if ENABLE_INETWORK_SERIALIZE
        py::class_<Serializer>(m, "Serializer").def("serialize", &serialize);
    #else
        m.def("get_plugin_registry", &getPluginRegistry, py::return_value_policy::reference);
    #endif
        m.attr("float16") = DataType::kHALF;
        py::bind_vector<std::vector<size_t>>(m, "NodeIndices");
    }
''')


def test_pybind11_bindings_parse_into_python_names():
    api = gen.parse_api_sources({"python/src/infer/pyCore.cpp": CPP})
    layer = api["classes"]["ILayer"]
    assert layer["members"] == ["name", "num_inputs", "precision", "set_output_type"]
    assert layer["deprecated"] == {"precision": "Deprecated in TensorRT 10.12. Use strong typing."}
    conv = api["classes"]["IConvolutionLayer"]
    assert conv["bases"] == ["ILayer"] and conv["members"] == ["__repr__", "kernel_size_nd"]
    assert api["classes"]["ILogger"]["members"] == ["ERROR", "WARNING", "__init__", "log"]
    assert api["enums"] == {"ILogger.Severity": ["ERROR", "WARNING"], "NetworkDefinitionCreationFlag": ["EXPLICIT_BATCH"]}
    assert "Serializer" not in api["classes"] and "Ghost" not in api["classes"]  # off by default / a comment
    assert api["functions"] == ["get_plugin_registry"] and api["attributes"] == ["float16"]
    assert "NodeIndices" in api["classes"]


def test_a_name_the_parser_cannot_place_stops_the_generator():
    lost = CPP.replace("    m.attr(", '    someOtherBinding.def("lost", &f);\n    m.attr(')
    with pytest.raises(gen.SourceError, match="lost"):
        gen.parse_api_sources({"pyCore.cpp": lost})


def test_an_unknown_build_switch_stops_the_generator():
    with pytest.raises(gen.SourceError, match="NEW_SWITCH"):
        gen.parse_api_sources({"pyCore.cpp": CPP.replace("ENABLE_INETWORK_SERIALIZE", "NEW_SWITCH")})


# ----------------------------------------------------------------------- argument lists and properties

SIG_CPP = textwrap.dedent(r'''
    void bindSignatures(py::module& m)
    {
        py::class_<IBuilderConfig>(m, "IBuilderConfig", py::module_local())
            .def(py::init<>())
            .def("set_device_type", &IBuilderConfig::setDeviceType, "layer"_a, "device_type"_a, Doc::set_device_type)
            .def("set_flags", &IBuilderConfig::setFlags, "flags"_a = 0U, "strict"_a = std::vector<int>{1, 2}, Doc::x,
                py::keep_alive<0, 1>{})
            .def("get_calibration_profile", &IBuilderConfig::getCalibrationProfile, Doc::get_calibration_profile)
            .def_static("make", &make, "name"_a, py::return_value_policy::reference)
            .def_property("DLA_core", &IBuilderConfig::getDLACore, &IBuilderConfig::setDLACore)
            .def_property_readonly("num_optimization_profiles", &IBuilderConfig::getNbOptimizationProfiles)
            .def_readwrite("offset", &IBuilderConfig::offset)
            .def_readonly("size", &IBuilderConfig::size)
            .def_property("gpu_allocator", nullptr, py::cpp_function(&IBuilderConfig::setGpuAllocator, "a"_a));

        py::class_<IRuntime>(m, "Runtime", py::module_local())
            .def(py::init(&nvinfer1::createInferRuntime), "logger"_a, Doc::init, py::keep_alive<1, 2>{})
            .def("deserialize_cuda_engine", lambdas::deserialize, "serialized_engine"_a, Doc::deserialize)
            .def("deserialize_cuda_engine", py::overload_cast<IStreamReader&>(&IRuntime::deserializeCudaEngine),
                "stream_reader"_a, Doc::deserialize_reader);

        py::class_<IExecutionContext>(m, "IExecutionContext", py::module_local())
            .def("execute_async_v2", lambdas::execute_async_v2, py::arg("bindings"), py::arg("stream_handle"),
                py::arg("input_consumed") = nullptr, Doc::execute_async_v2)
            .def("set_strategy", &f, py::arg("strategy").noconvert() = Strategy::kSTATIC, py::keep_alive<0, 1>{})
            .def(py::init<int32_t, int32_t>())
            .def(py::self == py::self);

        m.def("init_libnvinfer_plugins", &initLibNvInferPlugins, "logger"_a, "namespace"_a);
        m.def("get_plugin_registry", &getPluginRegistry, py::return_value_policy::reference);
    }
''')


def _names(overloads):
    """[[(name, default), ...] or None per overload]: an overload as the tests spell it."""
    return [None if o is None else [(a["name"], a["default"]) for a in o] for o in overloads]


@pytest.fixture(scope="module")
def sig_api():
    return gen.parse_api_sources({"python/src/infer/pyCore.cpp": SIG_CPP})


def test_underscore_a_lists_parse_in_order_with_defaults(sig_api):
    s = sig_api["classes"]["IBuilderConfig"]["signatures"]
    assert _names(s["set_device_type"]) == [[("layer", False), ("device_type", False)]]
    assert _names(s["set_flags"]) == [[("flags", True), ("strict", True)]]  # a default with commas inside
    assert _names(s["make"]) == [[("name", False)]]  # .def_static
    assert s["get_calibration_profile"] == [None]  # names no arguments: arity not guessed


def test_py_arg_form_parses(sig_api):
    s = sig_api["classes"]["IExecutionContext"]["signatures"]
    assert _names(s["execute_async_v2"]) == [[("bindings", False), ("stream_handle", False), ("input_consumed", True)]]
    assert _names(s["set_strategy"]) == [[("strategy", True)]]
    assert s["__eq__"] == [None]


def test_overloads_of_one_name_are_all_kept_in_source_order(sig_api):
    s = sig_api["classes"]["Runtime"]["signatures"]
    assert _names(s["deserialize_cuda_engine"]) == [[("serialized_engine", False)], [("stream_reader", False)]]


def test_constructors_are_signatures_of_init(sig_api):
    classes = sig_api["classes"]
    assert _names(classes["Runtime"]["signatures"]["__init__"]) == [[("logger", False)]]
    assert classes["IBuilderConfig"]["signatures"]["__init__"] == [[]]  # py::init<>(): no arguments, known
    assert classes["IExecutionContext"]["signatures"]["__init__"] == [None]  # py::init<int32_t, int32_t>(): unnamed


def test_properties_say_whether_python_may_set_them(sig_api):
    c = sig_api["classes"]["IBuilderConfig"]
    assert c["properties"] == {"DLA_core": "rw", "num_optimization_profiles": "ro", "offset": "rw", "size": "ro",
                               "gpu_allocator": "wo"}  # a nullptr getter: write-only
    assert not set(c["properties"]) & set(c["signatures"])
    assert set(c["members"]) == set(c["properties"]) | set(c["signatures"])  # members is still every name


def test_module_functions_get_signatures_too(sig_api):
    f = sig_api["function_signatures"]
    assert _names(f["init_libnvinfer_plugins"]) == [[("logger", False), ("namespace", False)]]
    assert f["get_plugin_registry"] == [None]
    assert sig_api["functions"] == ["get_plugin_registry", "init_libnvinfer_plugins"]


def test_an_argument_annotation_the_parser_does_not_know_stops_the_generator():
    odd = SIG_CPP.replace('"layer"_a, "device_type"_a', '"layer"_a | flags, "device_type"_a')
    with pytest.raises(gen.SourceError, match="argument annotation"):
        gen.parse_api_sources({"pyCore.cpp": odd})


def _sig(branch: str, cls: str, member: str):
    return [None if o is None else [a["name"] for a in o]
            for o in _branches("trt_python_api.json")[branch]["classes"][cls]["signatures"][member]]


def test_the_data_holds_each_releases_call_signatures():
    """Checked by hand against release/8.5 and release/10.3 python/src/infer/pyCore.cpp."""
    assert _sig("release/8.5", "IBuilderConfig", "set_calibration_profile") == [["profile"]]
    assert _sig("release/8.5", "Runtime", "deserialize_cuda_engine") == [["serialized_engine"]]
    assert _sig("release/8.5", "IExecutionContext", "execute_async_v2") == [
        ["bindings", "stream_handle", "input_consumed"]]
    assert _sig("release/8.5", "Builder", "create_network") == [["flags"]]
    assert _sig("release/10.3", "IExecutionContext", "execute_async_v3") == [["stream_handle"]]
    assert _sig("release/10.3", "Runtime", "deserialize_cuda_engine") == [["serialized_engine"], ["stream_reader"]]
    assert _sig("release/10.3", "Runtime", "__init__") == [["logger"]]
    api = _branches("trt_python_api.json")
    assert "execute_async_v2" not in api["release/10.3"]["classes"]["IExecutionContext"]["signatures"]
    ctx85 = api["release/8.5"]["classes"]["IExecutionContext"]["signatures"]["execute_async_v2"][0]
    assert [a["default"] for a in ctx85] == [False, False, True]  # input_consumed = nullptr
    for branch in ("release/8.5", "release/10.3"):
        classes = api[branch]["classes"]
        assert classes["IBuilderConfig"]["properties"]["DLA_core"] == "rw"
        assert classes["Runtime"]["properties"]["DLA_core"] == "rw"
        assert classes["Runtime"]["properties"]["num_DLA_cores"] == "ro"
        assert classes["Runtime"]["properties"]["gpu_allocator"] == "wo"
        assert _sig(branch, "IBuilderConfig", "set_device_type") == [["layer", "device_type"]]


def test_every_member_in_the_data_is_a_signature_a_property_or_an_exported_enum_value():
    for branch, entry in _branches("trt_python_api.json").items():
        for name, c in entry["classes"].items():
            sigs, props = set(c["signatures"]), set(c["properties"])
            assert not sigs & props, (branch, name)
            exported = {v for e, vals in entry["enums"].items() if e.rpartition(".")[0] == name for v in vals}
            assert set(c["members"]) - sigs - props <= exported, (branch, name)
            assert all(o is None or all(set(a) == {"name", "default"} for a in o)
                       for ovs in c["signatures"].values() for o in ovs), (branch, name)
        assert set(entry["function_signatures"]) == set(entry["functions"]), branch
