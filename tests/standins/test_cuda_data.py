"""The committed cuda-python signature data (tests/standins/data/cuda_python.json) says what the wheels say.

The JSON is written by tools/gen_cuda_signatures.py from the Cython source each cuda-python wheel ships
(`python tools/gen_cuda_signatures.py --check` re-reads the wheels); these tests read only the JSON, and
pin the facts the stand-ins depend on, each one looked up by hand in the wheel's runtime .pyx:
cuda/cudart.pyx in 11.8.2 and 12.2.1, cuda/bindings/runtime.pyx in 12.6.2.post1 and (cuda-bindings) 13.0.3.
"""
import importlib.util
import json
import re
from pathlib import Path

import pytest

DATA = Path(__file__).parent / "data" / "cuda_python.json"
TOOL = Path(__file__).resolve().parents[2] / "tools" / "gen_cuda_signatures.py"

JETPACK = {"11.8.2": ["5.1"], "12.2.1": ["6.0"], "12.6.2.post1": ["6.1", "6.2"], "13.0.3": ["7"]}
VERSIONS = list(JETPACK)
CUDA12_UP = ["12.2.1", "12.6.2.post1", "13.0.3"]


@pytest.fixture(scope="module")
def data() -> dict:
    return json.loads(DATA.read_text())


def params(data: dict, version: str, function: str) -> list[str]:
    return [p["name"] for p in data["versions"][version]["functions"][function]["params"]]


def test_versions_and_jetpacks(data):
    assert data["generated_by"] == "python tools/gen_cuda_signatures.py"
    assert sorted(data["versions"]) == sorted(VERSIONS)
    for version, jetpacks in JETPACK.items():
        assert data["versions"][version]["jetpack"] == jetpacks


def test_the_file_is_in_the_generators_stable_form(data):
    spec = importlib.util.spec_from_file_location("gen_cuda_signatures", TOOL)
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)  # importing it downloads nothing: only main() does
    assert list(tool.VERSIONS) == VERSIONS and tool.VERSIONS == JETPACK
    assert DATA.read_text() == tool.dump(data) + "\n"


@pytest.mark.parametrize("version", VERSIONS)
def test_wheels_recorded(data, version):
    wheels = data["versions"][version]["wheels"]
    for wheel in wheels:
        assert re.fullmatch(r"[0-9a-f]{64}", wheel["sha256"])
        assert wheel["file"].endswith(".whl")
    files = [w["file"] for w in wheels]
    assert files[0].startswith(f"cuda_python-{version}-")
    if version == "13.0.3":  # cuda-python 13 is a metapackage: the bindings are in cuda-bindings
        assert files[0] == "cuda_python-13.0.3-py3-none-any.whl"
        assert len(files) == 2 and files[1].startswith("cuda_bindings-13.0.3-")
    else:
        assert len(files) == 1


def test_cuda_graph_instantiate_cuda11_vs_cuda12(data):
    # the known bug: CUDA 11 takes a log buffer, 12.x takes flags
    assert params(data, "11.8.2", "cudaGraphInstantiate") == ["graph", "pLogBuffer", "bufferSize"]
    assert data["versions"]["11.8.2"]["functions"]["cudaGraphInstantiate"]["returns"] == 3  # err, exec, errorNode
    for version in CUDA12_UP:
        assert params(data, version, "cudaGraphInstantiate") == ["graph", "flags"]
        assert data["versions"][version]["functions"]["cudaGraphInstantiate"]["returns"] == 2  # err, exec


# function -> (parameter names, values returned, cudaError_t included): the same in all four releases
SAME_EVERYWHERE = {
    "cudaGraphInstantiateWithFlags": (["graph", "flags"], 2),
    "cudaStreamBeginCapture": (["stream", "mode"], 1),
    "cudaStreamEndCapture": (["stream"], 2),
    "cudaMemcpyAsync": (["dst", "src", "count", "kind", "stream"], 1),
    "cudaMallocHost": (["size"], 2),
    "cudaEventElapsedTime": (["start", "end"], 2),
    "cudaStreamIsCapturing": (["stream"], 2),
    "cudaRuntimeGetVersion": ([], 2),
    "cudaGetDeviceProperties": (["device"], 2),
    "cudaStreamGetCaptureInfo": (["stream"], None),  # returns: see below
}


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("function", sorted(SAME_EVERYWHERE))
def test_signatures(data, version, function):
    names, returns = SAME_EVERYWHERE[function]
    entry = data["versions"][version]["functions"][function]
    assert [p["name"] for p in entry["params"]] == names
    assert all(p["default"] is None for p in entry["params"])
    if returns is not None:
        assert entry["returns"] == returns


def test_stream_get_capture_info_returns(data):
    # 11.8: (err, status, id); 12.x: + graph, dependencies, numDependencies (the _v2 API); 13.0: + edgeData
    returns = {v: data["versions"][v]["functions"]["cudaStreamGetCaptureInfo"]["returns"] for v in VERSIONS}
    assert returns == {"11.8.2": 3, "12.2.1": 6, "12.6.2.post1": 6, "13.0.3": 7}
    assert "cudaStreamGetCaptureInfo_v2" in data["versions"]["11.8.2"]["functions"]
    for version in CUDA12_UP:
        assert "cudaStreamGetCaptureInfo_v2" not in data["versions"][version]["functions"]


def test_defaults_are_source_text(data):
    entry = data["versions"]["12.2.1"]["functions"]["cudaGraphGetNodes"]
    assert entry["params"] == [{"name": "graph", "default": None}, {"name": "numNodes", "default": "0"}]


def test_modules(data):
    v = data["versions"]
    assert v["11.8.2"]["modules"] == ["cuda.cudart"]
    assert v["12.2.1"]["modules"] == ["cuda.cudart"]
    assert v["12.6.2.post1"]["modules"] == ["cuda.bindings.runtime", "cuda.cudart"]
    assert v["13.0.3"]["modules"] == ["cuda.bindings.runtime"]
    assert v["11.8.2"]["module_status"] == {"cuda.cudart": "native", "cuda.bindings.runtime": "missing"}
    assert v["12.2.1"]["module_status"] == {"cuda.cudart": "native", "cuda.bindings.runtime": "missing"}
    assert v["12.6.2.post1"]["module_status"] == {"cuda.cudart": "deprecated-alias", "cuda.bindings.runtime": "native"}
    assert v["13.0.3"]["module_status"] == {"cuda.cudart": "missing", "cuda.bindings.runtime": "native"}
    assert v["11.8.2"]["source"] == v["12.2.1"]["source"] == "cuda/cudart.pyx"
    assert v["12.6.2.post1"]["source"] == v["13.0.3"]["source"] == "cuda/bindings/runtime.pyx"


def test_version_attributes(data):
    attrs = {version: data["versions"][version]["version_attributes"] for version in VERSIONS}
    for version in ("11.8.2", "12.2.1"):
        assert attrs[version]["cuda.__version__"]["status"] == "ok"
        assert attrs[version]["cuda.__version__"]["source"] == "cuda/_version.py"
        assert attrs[version]["cuda.__version__"]["value"] == version
        assert attrs[version]["cuda.bindings.__version__"]["status"] == "missing"
    a = attrs["12.6.2.post1"]
    assert a["cuda.bindings.__version__"]["value"] == "12.6.2.post1"
    assert a["cuda.__version__"]["status"] == "deprecated"  # a module __getattr__ that warns
    a = attrs["13.0.3"]
    assert a["cuda.bindings.__version__"]["value"] == "13.0.3"
    assert a["cuda.bindings.__version__"]["source"] == "cuda/bindings/_version.py"
    assert a["cuda.__version__"]["status"] == "missing"  # cuda is a namespace package


@pytest.mark.parametrize("version", VERSIONS)
def test_enums(data, version):
    enums = data["versions"][version]["enums"]
    assert enums["cudaMemcpyKind"] == ["cudaMemcpyHostToHost", "cudaMemcpyHostToDevice", "cudaMemcpyDeviceToHost",
                                       "cudaMemcpyDeviceToDevice", "cudaMemcpyDefault"]
    assert enums["cudaStreamCaptureMode"] == ["cudaStreamCaptureModeGlobal", "cudaStreamCaptureModeThreadLocal",
                                              "cudaStreamCaptureModeRelaxed"]
    assert enums["cudaStreamCaptureStatus"] == ["cudaStreamCaptureStatusNone", "cudaStreamCaptureStatusActive",
                                                "cudaStreamCaptureStatusInvalidated"]
    flags = ["cudaGraphInstantiateFlagAutoFreeOnLaunch", "cudaGraphInstantiateFlagUseNodePriority"]
    if version != "11.8.2":
        flags[1:1] = ["cudaGraphInstantiateFlagUpload", "cudaGraphInstantiateFlagDeviceLaunch"]
    assert enums["cudaGraphInstantiateFlags"] == flags
    assert enums["cudaGraphExecUpdateResult"][0] == "cudaGraphExecUpdateSuccess"
    errors = enums["cudaError_t"]
    assert errors[:2] == ["cudaSuccess", "cudaErrorInvalidValue"]
    assert {"cudaErrorNotReady", "cudaErrorStreamCaptureInvalidated", "cudaErrorUnknown"} <= set(errors)
    assert len(errors) == len(set(errors)) > 120


@pytest.mark.parametrize("version", VERSIONS)
def test_every_function_is_well_formed(data, version):
    functions = data["versions"][version]["functions"]
    assert sum(name.startswith("cuda") for name in functions) > 250
    for name, entry in functions.items():
        assert set(entry) == {"params", "returns"}, name
        if name.startswith(("make_cuda", "sizeof")):  # they return the object itself, not a tuple
            assert entry["returns"] is None, name
        else:  # every cudaXxx (and 12.6+'s getLocalRuntimeVersion) returns a tuple led by its cudaError_t
            assert isinstance(entry["returns"], int) and entry["returns"] >= 1, name
        for p in entry["params"]:
            assert set(p) == {"name", "default"} and re.fullmatch(r"\w+", p["name"]), name
