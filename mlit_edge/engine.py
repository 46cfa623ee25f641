"""TensorRT engines: build a raw `.plan` from a precision-carrying ONNX, and load one safely.

`tensorrt` (JetPack, x86 CUDA) and `tensorrt_rtx` (PyPI, builds without a GPU) are imported lazily,
so this module imports anywhere. The network is strongly typed: precision comes from the ONNX (fp16
casts, INT8 Q/DQ), never from builder flags. The `.plan` stays raw so trtexec and DeepStream load it;
its `.plan.json` sidecar records what it was built from, with what, and for which device.

`load_engine` reads the plan once and checks, in this order and before TensorRT deserializes those
same bytes: their sha256 against the sidecar, the TensorRT module and version, and the GPU's compute
capability. A mismatch is one line that says how to rebuild.
"""
from __future__ import annotations

import platform
import re
import shutil
import subprocess
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from .sidecar import atomic_path, read_sidecar, sha256_file, user_fields, write_sidecar

TARGETS = ("tensorrt", "tensorrt-rtx")
PLAN_SUFFIXES = (".plan", ".engine", ".trt")  # what trtexec and DeepStream users call serialized engines
MODULES = {"tensorrt": "tensorrt", "tensorrt-rtx": "tensorrt_rtx"}


class EngineError(RuntimeError):
    """A plan that must not be deserialized here (tampered, another TensorRT, another GPU)."""


def import_trt(target: str):
    """The TensorRT module of `target`, or a one-line error naming what to install."""
    name = MODULES[target]
    try:
        return __import__(name)
    except ImportError:
        hint = ("TensorRT comes with JetPack on Jetson, or `pip install tensorrt` with CUDA on x86; "
                "--target onnxruntime or --target tensorrt-rtx work on this machine") if target == "tensorrt" \
            else "pip install 'mlit-edge[trt-check]'"
        raise RuntimeError(f"--target {target}: the `{name}` module is not installed ({hint})") from None


# --- the machine -----------------------------------------------------------------------------------

@dataclass(frozen=True)
class DeviceEnv:
    """What an engine is tied to: the TensorRT build and the GPU (None where there is none)."""

    trt_module: str | None
    trt_version: str | None
    gpu_name: str | None = None
    compute_capability: str | None = None  # "8.7"
    cuda_version: str | None = None
    l4t: str | None = None  # Jetson Linux release, e.g. "R36.4.3"
    jetpack: str | None = None
    platform: str = ""


def _cuda_props() -> tuple[str | None, str | None, str | None]:
    """GPU 0's name, compute capability and the CUDA runtime version, via cuda-python or nvidia-smi."""
    try:
        from cuda.bindings import runtime as cudart  # cuda-python >= 12.6

        err, count = cudart.cudaGetDeviceCount()
        if int(err) == 0 and count > 0:
            err, props = cudart.cudaGetDeviceProperties(0)
            _, ver = cudart.cudaRuntimeGetVersion()
            name = props.name.decode(errors="replace").rstrip("\0") if isinstance(props.name, bytes) else str(props.name)
            return name, f"{props.major}.{props.minor}", f"{ver // 1000}.{ver % 1000 // 10}"
        return None, None, None
    except Exception:  # not installed, or no driver: fall through to nvidia-smi
        pass
    smi = shutil.which("nvidia-smi")
    if smi:
        try:
            out = subprocess.run([smi, "--query-gpu=name,compute_cap", "--format=csv,noheader"], capture_output=True,
                                 text=True, timeout=10).stdout.strip().splitlines()
            if out:
                name, cap = (s.strip() for s in out[0].split(","))
                return name, cap, None
        except (OSError, subprocess.SubprocessError, ValueError):
            pass
    return None, None, None


def _jetson() -> tuple[str | None, str | None]:
    """(L4T release, JetPack version) on a Jetson; (None, None) elsewhere."""
    l4t = jetpack = None
    release = Path("/etc/nv_tegra_release")
    if release.is_file():
        m = re.search(r"R(\d+)\s*\(release\),\s*REVISION:\s*([\d.]+)", release.read_text())
        if m:
            l4t = f"R{m.group(1)}.{m.group(2)}"
    if l4t and shutil.which("dpkg-query"):
        try:
            jetpack = subprocess.run(["dpkg-query", "-W", "-f=${Version}", "nvidia-jetpack"], capture_output=True,
                                     text=True, timeout=10).stdout.strip() or None
        except (OSError, subprocess.SubprocessError):
            pass
    return l4t, jetpack


def local_env(target: str | None = None) -> DeviceEnv:
    """This machine, as an engine sees it. `target` picks the TensorRT flavour to report."""
    trt = None
    if target:
        try:
            trt = import_trt(target)
        except RuntimeError:  # not installed: the env says "no TensorRT"
            trt = None
    name, cap, cuda = _cuda_props()
    l4t, jetpack = _jetson()
    return DeviceEnv(trt.__name__ if trt else None, trt.__version__ if trt else None, name, cap, cuda, l4t, jetpack,
                     f"{platform.system()} {platform.machine()}")


# --- building --------------------------------------------------------------------------------------

@dataclass(frozen=True)
class BuildOptions:
    """Builder settings; `profile` is (min, opt, max) batch for a dynamic-batch ONNX."""

    profile: tuple[int, int, int] = (1, 8, 64)
    workspace_gib: float = 1.0
    timing_cache: str | None = None
    dla_core: int | None = None


def _strongly_typed_network(trt, builder):
    flags = 0
    if hasattr(trt.NetworkDefinitionCreationFlag, "STRONGLY_TYPED"):
        flags |= 1 << int(trt.NetworkDefinitionCreationFlag.STRONGLY_TYPED)
    return builder.create_network(flags)


def build_serialized(onnx_path: str | Path, trt, opts: BuildOptions = BuildOptions()) -> dict:
    """Parse and build; {"ok": True, "engine": bytes, layers, build_s, io, ...} or {"ok": False,
    "stage", "errors"} with the parser's errors verbatim."""
    logger = trt.Logger(trt.Logger.ERROR)
    builder = trt.Builder(logger)
    network = _strongly_typed_network(trt, builder)
    parser = trt.OnnxParser(network, logger)
    base = {"module": trt.__name__, "version": trt.__version__}
    start = time.perf_counter()
    if not parser.parse_from_file(str(onnx_path)):
        return {**base, "ok": False, "stage": "parse",
                "errors": [str(parser.get_error(i)) for i in range(parser.num_errors)]}
    config = builder.create_builder_config()
    config.set_memory_pool_limit(trt.MemoryPoolType.WORKSPACE, int(opts.workspace_gib * (1 << 30)))
    flags: dict = {"strongly_typed": True, "workspace_gib": opts.workspace_gib}
    inp = network.get_input(0)
    rest = tuple(inp.shape)[1:]
    if inp.shape[0] == -1:
        lo, opt, hi = opts.profile
        profile = builder.create_optimization_profile()
        profile.set_shape(inp.name, (lo, *rest), (opt, *rest), (hi, *rest))
        config.add_optimization_profile(profile)
        flags["profile"] = {"input": inp.name, "min": lo, "opt": opt, "max": hi}
    else:
        flags["profile"] = {"input": inp.name, "static": int(inp.shape[0])}
    cache = None
    if opts.timing_cache:
        blob = Path(opts.timing_cache).read_bytes() if Path(opts.timing_cache).is_file() else b""
        cache = config.create_timing_cache(blob)
        config.set_timing_cache(cache, ignore_mismatch=False)
        flags["timing_cache"] = {"path": str(opts.timing_cache), "read_bytes": len(blob)}
    if opts.dla_core is not None:
        cores = getattr(builder, "num_DLA_cores", 0)
        if opts.dla_core >= cores:
            raise RuntimeError(f"--dla-core {opts.dla_core}: this platform has {cores} DLA core(s) "
                               "(DLA exists on Jetson AGX/NX Orin and Xavier)")
        config.default_device_type = trt.DeviceType.DLA
        config.DLA_core = opts.dla_core
        config.set_flag(trt.BuilderFlag.GPU_FALLBACK)
        flags.update(dla_core=opts.dla_core, gpu_fallback=True)
    engine = builder.build_serialized_network(network, config)
    seconds = time.perf_counter() - start
    if engine is None:
        return {**base, "ok": False, "stage": "build",
                "errors": ["build_serialized_network returned no engine (see the TensorRT log above)"]}
    if cache is not None:
        with atomic_path(opts.timing_cache) as tmp:
            tmp.write_bytes(bytes(config.get_timing_cache().serialize()))
        flags["timing_cache"]["written_bytes"] = Path(opts.timing_cache).stat().st_size
    io = {"inputs": [_tensor(network.get_input(i)) for i in range(network.num_inputs)],
          "outputs": [_tensor(network.get_output(i)) for i in range(network.num_outputs)]}
    return {**base, "ok": True, "engine": bytes(engine), "layers": network.num_layers, "build_s": round(seconds, 2),
            "flags": flags, "io": io}


def _tensor(t) -> dict:
    return {"name": t.name, "dtype": str(t.dtype).rsplit(".", 1)[-1].lower(), "shape": list(t.shape)}


def write_plan(engine: bytes, out: str | Path, record: dict) -> dict:
    """Write the raw plan atomically, then its sidecar; returns the sidecar record."""
    out = Path(out)
    with atomic_path(out) as tmp:
        tmp.write_bytes(engine)
    return write_sidecar(out, record)


def engine_record(onnx_path: str | Path, result: dict, env: DeviceEnv, target: str, frontend: str = "onnx") -> dict:
    """The `.plan.json` fields: the source ONNX's provenance plus the builder, the device and the flags."""
    onnx_path = Path(onnx_path)
    try:
        src = user_fields(read_sidecar(onnx_path))
    except FileNotFoundError:
        src = {}
    src.pop("inputs", None)
    src.pop("outputs", None)
    calib = src.get("calibration") or {}
    return {**src, "kind": "tensorrt-engine", "target": target, "frontend": frontend,
            "source_onnx": onnx_path.name, "source_onnx_sha256": sha256_file(onnx_path) if onnx_path.is_file() else None,
            "calibration_sha256": calib.get("manifest_sha256"),
            "engine": {"builder": {"module": result["module"], "version": result["version"]}, "device": asdict(env),
                       "dla_core": result["flags"].get("dla_core"), "flags": result["flags"],
                       "layers": result.get("layers"), "build_s": result.get("build_s"), "io": result.get("io")}}


# --- loading ---------------------------------------------------------------------------------------

def rebuild_hint(record: dict) -> str:
    src = record.get("source_onnx") or "model.onnx"
    return f"rebuild it here: mlit-edge build --onnx {src} --precision {record.get('precision', 'fp16')} --target " \
           f"{record.get('target', 'tensorrt')}"


def check_compatible(record: dict, env: DeviceEnv) -> None:
    """Raise EngineError (one line, with the rebuild command) unless `env` can run the plan of `record`."""
    eng = record.get("engine") or {}
    built = eng.get("builder") or {}
    dev = eng.get("device") or {}
    if built.get("module") != env.trt_module or built.get("version") != env.trt_version:
        have = f"{env.trt_module} {env.trt_version}" if env.trt_module else "no TensorRT"
        raise EngineError(f"{record.get('artifact')} was built with {built.get('module')} {built.get('version')}; this "
                          f"machine has {have}; {rebuild_hint(record)}")
    if env.compute_capability is None:
        raise EngineError(f"{record.get('artifact')}: no CUDA GPU on this machine, and a TensorRT engine needs one to "
                          "deserialize (use the .onnx with ONNX Runtime here)")
    want = dev.get("compute_capability")
    if want is not None and want != env.compute_capability:
        raise EngineError(f"{record.get('artifact')} was built for {dev.get('gpu_name')} (sm_{want.replace('.', '')}); "
                          f"this GPU is {env.gpu_name} (sm_{env.compute_capability.replace('.', '')}); "
                          f"{rebuild_hint(record)}")


def verify_plan(plan: str | Path, env: DeviceEnv | None = None, content: bytes | None = None) -> dict:
    """The plan's sidecar record once the plan is proven intact and runnable here (nothing is
    deserialized). `content`: the plan's bytes as they will be deserialized, hashed instead of the
    file. Every refusal is an EngineError or FileNotFoundError with one line."""
    plan = Path(plan)
    if not plan.is_file():
        raise FileNotFoundError(f"{plan} does not exist")
    try:
        record = read_sidecar(plan, content=content)
    except ValueError as e:
        raise EngineError(str(e)) from None
    if record.get("kind") != "tensorrt-engine":
        raise EngineError(f"{plan}: its sidecar describes a {record.get('kind', 'non-engine')} artifact, not a "
                          "TensorRT engine")
    check_compatible(record, env or local_env(record.get("target", "tensorrt")))
    return record


def load_engine(plan: str | Path, env: DeviceEnv | None = None):
    """Verify the plan (sha256, TensorRT version, GPU) and only then deserialize it.

    Returns (engine, sidecar record).
    """
    plan = Path(plan)
    content = plan.read_bytes() if plan.is_file() else None  # one read: the bytes hashed are the bytes loaded
    record = verify_plan(plan, env, content)
    trt = import_trt(record.get("target", "tensorrt"))
    runtime = trt.Runtime(trt.Logger(trt.Logger.ERROR))
    engine = runtime.deserialize_cuda_engine(content)
    if engine is None:
        raise EngineError(f"TensorRT could not deserialize {plan}; {rebuild_hint(record)}")
    return engine, record


# --- torch-tensorrt frontend -----------------------------------------------------------------------

def require_torch_tensorrt(precision: str):
    """torch_tensorrt, or a one-line error saying why this frontend cannot run here."""
    if precision == "int8":
        raise ValueError("--frontend torch-tensorrt builds fp32 and fp16; INT8 goes through the calibrated ONNX "
                         "(drop --frontend)")
    try:
        import torch
        import torch_tensorrt
    except ImportError:
        raise RuntimeError("--frontend torch-tensorrt: torch_tensorrt is not installed (pip install torch-tensorrt "
                           "on a CUDA workstation); the default ONNX frontend needs only TensorRT") from None
    if not torch.cuda.is_available():
        raise RuntimeError("--frontend torch-tensorrt needs a CUDA GPU")
    return torch_tensorrt


def torch_tensorrt_engine(module, precision: str, opts: BuildOptions, example_shape: tuple[int, ...],
                          static_batch: int | None) -> dict:
    """Compile a `to_deploy` module through torch-tensorrt's dynamo path into raw engine bytes.

    CUDA workstations only. INT8 needs explicit quantization (ModelOpt), so it goes through the ONNX
    frontend instead.
    """
    import torch

    torch_tensorrt = require_torch_tensorrt(precision)
    module = module.cuda().eval()
    dtype = torch.float16 if precision == "fp16" else torch.float32
    rest = example_shape[1:]
    if static_batch:
        inputs = [torch_tensorrt.Input((static_batch, *rest), dtype=torch.float32)]
        example = torch.zeros(static_batch, *rest, device="cuda")
        dynamic = None
    else:
        lo, opt, hi = opts.profile
        inputs = [torch_tensorrt.Input(min_shape=(lo, *rest), opt_shape=(opt, *rest), max_shape=(hi, *rest),
                                       dtype=torch.float32)]
        example = torch.zeros(opt, *rest, device="cuda")
        dynamic = ({0: torch.export.Dim("batch", min=lo, max=hi)},)
    program = torch.export.export(module, (example,), dynamic_shapes=dynamic)
    start = time.perf_counter()
    kwargs = {"arg_inputs": inputs, "workspace_size": int(opts.workspace_gib * (1 << 30))}
    if precision == "fp16":
        kwargs.update(enabled_precisions={dtype}, use_explicit_typing=False)
    if opts.timing_cache:
        kwargs["timing_cache_path"] = str(opts.timing_cache)
    engine = torch_tensorrt.dynamo.convert_exported_program_to_serialized_trt_engine(program, **kwargs)
    import tensorrt as trt

    lo, opt, hi = (static_batch,) * 3 if static_batch else opts.profile
    return {"ok": True, "module": "tensorrt", "version": trt.__version__, "engine": bytes(engine), "layers": None,
            "build_s": round(time.perf_counter() - start, 2),
            "flags": {"frontend": f"torch-tensorrt {torch_tensorrt.__version__}", "precision": precision,
                      "workspace_gib": opts.workspace_gib, "profile": {"min": lo, "opt": opt, "max": hi},
                      "timing_cache": opts.timing_cache},
            "io": None}


def describe_env(env: DeviceEnv) -> str:
    gpu = f"{env.gpu_name} (sm_{env.compute_capability.replace('.', '')})" if env.compute_capability else "no GPU"
    trt = f"{env.trt_module} {env.trt_version}" if env.trt_module else "no TensorRT"
    extra = f", L4T {env.l4t}" if env.l4t else ""
    return f"{trt}, {gpu}{extra}"
