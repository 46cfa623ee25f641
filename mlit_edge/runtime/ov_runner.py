"""An OpenVINO IR (`mlit-edge build --target openvino`: X.xml, its weights in X.bin) through OpenVINO's CPU plugin.

The sidecar beside the .xml records the inference precision the IR was built and measured at (`openvino.
inference_precision`: f32, bf16 or f16), the build CPU's capabilities, and the sha256 of the .bin. `open_ir` checks
both files' bytes against it and the precision against this CPU before anything is compiled, then hands OpenVINO
those same bytes. A bf16 (or f16) IR on a CPU whose plugin lacks that type is refused rather than run in f32: its
recorded accuracy and expert agreement were measured at that precision, and f32 would run at another speed and
answer differently from what the sidecar vouches for.

The runner compiles the model once per input shape (static shapes, as an OpenVINO deployment compiles them, and as
benchmarks/deploy_latency.py measures them), keeping the last few. Torch-free; openvino is imported on `open`.
"""
from __future__ import annotations

import hashlib
from collections import OrderedDict
from pathlib import Path
from typing import Mapping

import numpy as np

from .images import InputError
from .runners import Runner
from ..artifacts.schema import ArtifactRecord, read_record
from ..artifacts.sidecar import SidecarError
from ..artifacts.targets import FORMATS
from ..base.messages import first_line, require_file
from ..base.values import check_threads, default_threads

# the inference precision hints a sidecar may record -> the CPU plugin's OPTIMIZATION_CAPABILITIES entry for each
CAPABILITY = {"f32": "FP32", "bf16": "BF16", "f16": "FP16"}
SHAPES_KEPT = 4  # [ours] compiled shapes a runner holds: a server's batches vary, each compile holds its memory
INSTALL = "pip install 'mlit-edge[openvino]'"


def import_openvino():
    """The openvino module, or a one-line error that says how to install it."""
    try:
        import openvino
    except ImportError:
        raise RuntimeError(f"OpenVINO is not installed here: {INSTALL}") from None
    return openvino


def cpu_capabilities(core) -> list[str]:
    """What OpenVINO's CPU plugin says this CPU computes in (its own OPTIMIZATION_CAPABILITIES: BF16 where it has
    AVX512-BF16 or AMX, FP16 where it has AMX-FP16 or is an ARM CPU), not what /proc/cpuinfo lists."""
    return [str(c) for c in core.get_property("CPU", "OPTIMIZATION_CAPABILITIES")]


def recorded_hint(record: ArtifactRecord, path: str | Path) -> str:
    """The inference precision hint an IR's sidecar records; a one-line error for one it lacks or garbles."""
    hint = record.ov_precision
    if not isinstance(hint, str) or hint not in CAPABILITY:
        raise SidecarError(f"{Path(path).name}.json: openvino.inference_precision is {hint!r}, expected one of "
                           f"{', '.join(CAPABILITY)}; rebuild it with mlit-edge build --target openvino")
    return hint


def check_hint(hint: str, capabilities: list[str], path: str | Path) -> None:
    """Refuse, in one line, an IR built for an inference precision this CPU's plugin does not offer."""
    if CAPABILITY[hint] not in capabilities:
        raise SidecarError(f"{Path(path).name} was built to compute in {hint}, which this CPU's OpenVINO plugin "
                           f"lacks (it offers {', '.join(capabilities)}); rebuild it here: mlit-edge build --target "
                           "openvino --precision fp32 (or fp16, which takes the half type this CPU has)")


def weights_path(xml: str | Path) -> Path:
    """model.xml -> model.bin: OpenVINO's own rule for the weights beside an IR (the format's companion)."""
    return Path(xml).with_suffix(FORMATS["openvino"].companions[0])


class OpenVINORunner(Runner):
    """An OpenVINO IR on the CPU. `content`: the .xml's and the .bin's bytes, already verified by the caller (read
    from `path` and the .bin beside it otherwise). `hint`: the inference precision (None: the plugin's default).
    `expose_routing` adds each TopK's indices as outputs (`route_names`), as the ONNX Runtime runner does."""

    name = "openvino"

    def __init__(self, path: str | Path, threads: int | None = None, hint: str | None = None,
                 expose_routing: bool = False, content: tuple[bytes, bytes] | None = None) -> None:
        super().__init__()
        self.path, self.threads, self.hint, self.expose_routing = Path(path), threads, hint, expose_routing
        self._content = content
        self._core = self._model = None
        self._requests: OrderedDict = OrderedDict()

    def activate_impl(self) -> None:
        ov = import_openvino()
        check_threads(self.threads, "threads")
        xml, weights = self._content or (self.path.read_bytes(), weights_path(self.path).read_bytes())
        self._core = ov.Core()
        try:
            model = self._core.read_model(model=xml.decode(), weights=ov.Tensor(np.frombuffer(weights, np.uint8)))
        except Exception as e:  # OpenVINO raises its own exception types for a bad IR
            raise ValueError(f"OpenVINO cannot read {self.path}: {first_line(e, 300)}") from None
        if self.expose_routing:
            tops = [op for op in model.get_ordered_ops() if op.get_type_name() == "TopK"]
            model.add_outputs([t.output(1) for t in tops])
        first = model.inputs[0]
        self.input_names = [i.get_any_name() for i in model.inputs]
        self.input_shape = tuple(d.get_length() if d.is_static else None for d in first.get_partial_shape())
        self.static_batch = self.input_shape[0] if self.input_shape else None
        self.input_dtype = first.get_element_type().to_dtype().name
        self.output_names = [o.get_any_name() for o in model.outputs]
        self.output_shapes = {o.get_any_name(): tuple(d.get_length() if d.is_static else None
                                                      for d in o.get_partial_shape()) for o in model.outputs}
        self.route_names = [n for n in self.output_names if n != "logits"]
        self._config = {"PERFORMANCE_HINT": "LATENCY"}
        threads = self.threads or default_threads()
        if threads:
            self._config["INFERENCE_NUM_THREADS"] = int(threads)
        if self.hint:
            self._config["INFERENCE_PRECISION_HINT"] = self.hint
        self._model = model
        self.settings = {"device": "CPU", "threads": threads, "inference_precision": self.hint or "default",
                         "shapes": "static, compiled per batch"}

    def deactivate_impl(self) -> None:
        self._requests.clear()
        self._model = self._core = None

    def _request(self, shape: tuple[int, ...]):
        """The infer request compiled for `shape`, compiled on its first call."""
        request = self._requests.get(shape)
        if request is not None:
            self._requests.move_to_end(shape)
            return request
        model = self._model.clone()
        model.reshape({model.inputs[0]: list(shape)})
        try:
            compiled = self._core.compile_model(model, "CPU", self._config)
        except Exception as e:
            raise InputError(f"OpenVINO cannot compile {self.path.name} for input {shape}: {first_line(e, 300)}") \
                from None
        hint = compiled.get_property("INFERENCE_PRECISION_HINT")  # an ov.Type, whose str() is "<Type: 'bfloat16'>"
        self.settings["inference_precision"] = hint.get_type_name() if hasattr(hint, "get_type_name") else str(hint)
        self._requests[shape] = request = compiled.create_infer_request()
        while len(self._requests) > SHAPES_KEPT:
            self._requests.popitem(last=False)
        return request

    def infer_impl(self, feed: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        x = feed[self.input_name]
        request = self._request(tuple(x.shape))
        try:
            result = request.infer({0: x})
        except Exception as e:
            raise InputError(f"OpenVINO cannot run {self.path.name}: {first_line(e, 300)}") from None
        # copied: the request reuses its output buffers on the next call
        return {name: np.array(result[i]) for i, name in enumerate(self.output_names)}


def verified_ir(path: str | Path, content: bytes | None = None) -> tuple[bytes, bytes, ArtifactRecord]:
    """An IR's .xml and .bin bytes and its sidecar record, both files checked against it (the .xml's sha256 as every
    artifact's, the .bin's as `openvino.weights_sha256`), before OpenVINO reads either."""
    path = Path(path)
    xml = content if content is not None else require_file(path).read_bytes()
    record = read_record(path, content=xml)
    recorded = record.ov_weights_sha256
    weights = require_file(weights_path(path)).read_bytes()
    if hashlib.sha256(weights).hexdigest() != recorded:
        raise SidecarError(f"{weights_path(path).name} does not match {path.name}.json (the sha256 of the IR's weights "
                           "differs): it was changed or replaced; rebuild it with mlit-edge build --target openvino")
    return xml, weights, record


def open_ir(path: Path, content: bytes, threads: int | None, routing: bool) -> tuple[Runner, ArtifactRecord]:
    """The runner of an IR and its verified record (runtime.artifact's opener of the openvino format)."""
    ov = import_openvino()
    xml, weights, record = verified_ir(path, content)
    hint = recorded_hint(record, path)
    check_hint(hint, cpu_capabilities(ov.Core()), path)
    return OpenVINORunner(path, threads, hint, routing, (xml, weights)), record
