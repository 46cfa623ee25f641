"""The GPU code against NVIDIA's real API surface, on a machine without a GPU: the TensorRT-facing modules
type-checked against TensorRT 10.13's stubs, every cudart name the runner calls looked up in cuda-python
under both import paths the code supports, and the runner opening a real plan with the real CUDA runtime."""
import ast
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.helpers import CLI, ENV, ROOT

PACKAGE = ROOT / "mlit_edge"


def _stubs() -> Path:
    """The cached TensorRT 10.13 stubs; a missing cache fails the test, naming the command that fetches it
    (the README's test command runs it before pytest: the tests download nothing)."""
    from tools.typecheck_trt import CACHE, cached, missing_message

    if not cached(CACHE):
        pytest.fail(missing_message(CACHE), pytrace=False)
    return CACHE


def _typecheck(*extra: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(ROOT / "tools" / "typecheck_trt.py"), "--no-fetch", *extra],
                          capture_output=True, text=True, cwd=ROOT, env=env, timeout=600)


def test_tensorrt_facing_modules_type_check_against_tensorrt_stubs():
    _stubs()
    proc = _typecheck()
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    import tomllib

    files = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["mypy"]["files"]
    assert f"Success: no issues found in {len(files)} source files" in proc.stdout


def test_the_type_check_catches_a_call_that_tensorrt_does_not_have(tmp_path):
    """The check bites: a method TensorRT 10 removed (execute_async_v2) and a wrong argument are errors,
    so a clean run above means the calls match the stubs, not that the stubs were never read."""
    stubs = _stubs()
    wrong = tmp_path / "wrong.py"
    wrong.write_text(textwrap.dedent("""
        import tensorrt as trt

        def run(engine: trt.ICudaEngine, context: trt.IExecutionContext) -> None:
            context.execute_async_v2([], 0)
            context.set_tensor_address(0, "x")
            engine.num_io_tensors()
    """))
    proc = subprocess.run([sys.executable, "-m", "mypy", "--config-file", str(ROOT / "pyproject.toml"), str(wrong)],
                          capture_output=True, text=True, cwd=ROOT, env={**ENV, "MYPYPATH": str(stubs)}, timeout=600)
    assert proc.returncode == 1, proc.stdout
    for words in ('has no attribute "execute_async_v2"', 'Argument 1 to "set_tensor_address"',
                  '"int" not callable'):
        assert words in proc.stdout, proc.stdout


@pytest.mark.slow
@pytest.mark.parametrize("version", ["8.5", "8.6", "10.3"])
def test_tensorrt_facing_modules_type_check_against_each_jetpacks_api(version):
    """Every TensorRT name the modules use exists in that release's own bindings (NVIDIA/TensorRT
    release/VERSION python/src, engine/data/trt_python_api.json), or is guarded: the 10.13 stubs less what the
    release lacks (tools/typecheck_trt.py --tensorrt)."""
    _stubs()
    proc = _typecheck("--tensorrt", version)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert f"TensorRT {version}: the 10.13 stubs less" in proc.stdout and "release/" + version in proc.stdout
    import tomllib

    files = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["mypy"]["files"]
    assert f"Success: no issues found in {len(files)} source files" in proc.stdout


@pytest.mark.slow
def test_an_unguarded_tensorrt_10_name_fails_the_8_5_check(tmp_path):
    """The per-release check bites: STRONGLY_TYPED (absent from release/8.5 and release/8.6) and
    LayerType.NORMALIZATION (absent from release/8.5) used without a guard fail against 8.5 and pass against
    10.3; the same names behind `hasattr` pass against 8.5."""
    _stubs()
    bad = tmp_path / "unguarded.py"
    bad.write_text(textwrap.dedent("""
        from typing import TYPE_CHECKING
        if TYPE_CHECKING:
            import tensorrt as trt

        def flags(module) -> int:
            if not TYPE_CHECKING:
                trt = module
            return 1 << int(trt.NetworkDefinitionCreationFlag.STRONGLY_TYPED)

        def kinds(module) -> set:
            if not TYPE_CHECKING:
                trt = module
            return {trt.LayerType.NORMALIZATION}
    """))
    guarded = tmp_path / "guarded.py"
    guarded.write_text(textwrap.dedent("""
        from typing import TYPE_CHECKING
        if TYPE_CHECKING:
            import tensorrt as trt

        def flags(module) -> int:
            if not TYPE_CHECKING:
                trt = module
            kinds = trt.NetworkDefinitionCreationFlag
            if hasattr(kinds, "STRONGLY_TYPED"):
                return 1 << int(kinds.STRONGLY_TYPED)
            return 1 << int(kinds.EXPLICIT_BATCH)
    """))
    old = _typecheck("--tensorrt", "8.5", "--files", str(bad), str(guarded))
    assert old.returncode == 1, old.stdout
    assert 'has no attribute "STRONGLY_TYPED"' in old.stdout and 'has no attribute "NORMALIZATION"' in old.stdout
    assert "/guarded.py" not in old.stdout and "Found 2 errors in 1 file" in old.stdout, old.stdout
    new = _typecheck("--tensorrt", "10.3", "--files", str(bad))
    assert new.returncode == 0, new.stdout


def _cudart_names() -> set[str]:
    """Every `cudart.X` (and `cudart.Enum.member`) that the runner and the environment probe use."""
    names = set()
    for source in (PACKAGE / "runtime" / "trt_runner.py", PACKAGE / "devices" / "trt_env.py"):
        for node in ast.walk(ast.parse(source.read_text())):
            if not isinstance(node, ast.Attribute):
                continue
            chain, base = [node.attr], node.value
            while isinstance(base, ast.Attribute) and base.attr != "cudart":
                chain.insert(0, base.attr)
                base = base.value
            is_cudart = (isinstance(base, ast.Name) and base.id == "cudart") or \
                (isinstance(base, ast.Attribute) and base.attr == "cudart")
            if is_cudart:
                names.add(".".join(chain))
    # an inner attribute of a chain is also visited alone; keep the longest forms and the plain calls
    return {n for n in names if not any(other.startswith(n + ".") for other in names)}


LOOKUP = """
import importlib, json, sys, warnings
warnings.simplefilter("ignore")
module = importlib.import_module(sys.argv[1])
missing = []
for name in json.loads(sys.argv[2]):
    obj = module
    for part in name.split("."):
        obj = getattr(obj, part, None)
    if obj is None:
        missing.append(name)
print(json.dumps({"file": module.__file__, "missing": missing}))
"""


def test_every_cudart_name_the_runner_uses_exists_under_both_import_paths():
    """`cuda.bindings.runtime` (cuda-python >= 12.6, installed here) and `cuda.cudart` (the path of JetPack
    6.0's cuda-python 12.2, in a folder of its own that `python tools/fetch_test_deps.py` fills)."""
    import json

    from tools.fetch_test_deps import CUDA_PYTHON_DIR, cuda_python_cached, cuda_python_missing_message

    names = _cudart_names()
    assert {"cudaStreamCreate", "cudaMallocHost", "cudaGraphLaunch", "cudaMemcpyKind.cudaMemcpyHostToDevice",
            "cudaStreamCaptureMode.cudaStreamCaptureModeThreadLocal", "cudaGetDeviceCount"} <= names, names
    legacy = CUDA_PYTHON_DIR
    if not cuda_python_cached(legacy):
        pytest.fail(cuda_python_missing_message(legacy), pytrace=False)
    for module, path in [("cuda.bindings.runtime", None), ("cuda.cudart", legacy)]:
        env = {**ENV, "PYTHONPATH": f"{path}"} if path else ENV
        proc = subprocess.run([sys.executable, "-c", LOOKUP, module, json.dumps(sorted(names))], capture_output=True,
                              text=True, env=env, timeout=120)
        assert proc.returncode == 0, proc.stderr[-2000:]
        found = json.loads(proc.stdout)
        assert found["missing"] == [], f"{module} ({found['file']}) lacks {found['missing']}"
        assert path is None or str(path) in found["file"]


def test_the_runner_names_the_missing_gpu_in_one_line_with_the_real_cuda_runtime(tmp_path):
    """A real plan (built here by TensorRT-RTX), the real cuda.bindings and this machine's CUDA runtime,
    which answers that there is no usable GPU: the runner refuses in one line that names it."""
    trt = pytest.importorskip("tensorrt_rtx")
    cudart = pytest.importorskip("cuda.bindings.runtime")
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    from mlit_edge.engine.plan import build_serialized, engine_record, write_plan
    from mlit_edge.artifacts.schema import ArtifactRecord
    from mlit_edge.devices.trt_env import EngineError, local_env
    from mlit_edge.runtime.trt_runner import TensorRTRunner

    err, count = cudart.cudaGetDeviceCount()
    if int(err) == 0 and count > 0:
        pytest.skip("this machine has a GPU")
    assert int(err) != 0, "the CUDA runtime answered, and found no device without an error"
    weight = numpy_helper.from_array(np.ones((3 * 36 * 36, 10), np.float32), "w")
    graph = helper.make_graph([helper.make_node("Flatten", ["images"], ["flat"]),
                               helper.make_node("MatMul", ["flat", "w"], ["logits"])], "tiny",
                              [helper.make_tensor_value_info("images", TensorProto.FLOAT, ["N", 3, 36, 36])],
                              [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", 10])], [weight])
    source = tmp_path / "tiny.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]), source)
    result = build_serialized(source, trt)
    assert result["ok"], result
    plan = tmp_path / "tiny.plan"
    record = engine_record(source, ArtifactRecord(), None, result, local_env("tensorrt-rtx"), "tensorrt-rtx")
    write_plan(result["engine"], plan, {**record, "precision": "fp32", "classes": [str(i) for i in range(10)],
                                        "preprocess": {"size": 36, "mean": [0.5] * 3, "std": [0.5] * 3}})
    with pytest.raises(EngineError) as refused:
        TensorRTRunner(plan).open()
    assert "no CUDA GPU on this machine" in str(refused.value) and "\n" not in str(refused.value)
    proc = subprocess.run([*CLI, "bench", str(plan)], capture_output=True, text=True, env=ENV, timeout=300)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 1 and len(lines) == 1 and "no CUDA GPU on this machine" in lines[0], proc.stderr


def test_the_gpu_check_script_explains_itself_and_refuses_without_a_gpu():
    import torch

    script = ROOT / "benchmarks" / "gpu_check.py"
    helped = subprocess.run([sys.executable, str(script), "--help"], capture_output=True, text=True, env=ENV)
    assert helped.returncode == 0
    for words in ("GradScaler", "bf16 autocast", "NCCL DDP", "CUDA graph at batch 1 and 64", "pinned host"):
        assert words in helped.stdout
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU: the script runs for real (see the closing note for its table)")
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=ENV, timeout=300)
    assert proc.returncode == 1 and proc.stdout == "" and len(proc.stderr.strip().splitlines()) == 1
    assert "no CUDA GPU here" in proc.stderr


def test_type_stubs_alone_are_not_taken_for_tensorrt(tmp_path):
    """`pip install tensorrt-stubs` leaves a bare `tensorrt/__init__.pyi` that imports as an empty namespace
    package; `build --target auto` then died on `trt.__version__` (found while adding the type check)."""
    (tmp_path / "tensorrt").mkdir()
    (tmp_path / "tensorrt" / "__init__.pyi").write_text("def Builder() -> None: ...\n")
    code = ("from mlit_edge.devices.trt_env import import_trt\n"
            "t = import_trt()\nprint(getattr(t, '__name__', None))\n"
            "try:\n    import_trt('tensorrt')\nexcept RuntimeError as e:\n    print(e)\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path,
                          env={**ENV, "PYTHONPATH": f"{tmp_path}:{ROOT}"}, timeout=120)
    first, second = proc.stdout.splitlines()[:2]
    assert first in ("tensorrt_rtx", "None") and "the `tensorrt` module is not installed" in second, proc.stderr
