"""The torch-tensorrt frontend: compile `to_deploy(model)` straight into a serialized engine.

CUDA workstations with torch-tensorrt only (it is not installable on the project's machines), so it
is lazily imported, a one-line error where missing, and its test is gpu-marked. INT8 needs explicit
quantization (ModelOpt), so it goes through the calibrated ONNX instead.
"""
from __future__ import annotations

import time

from .plan import BuildOptions

def require_torch_tensorrt():
    """torch_tensorrt, or a one-line error saying why this frontend cannot run here (the precisions it builds are
    its row's in artifacts.targets, checked with the request)."""
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

    torch_tensorrt = require_torch_tensorrt()
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
