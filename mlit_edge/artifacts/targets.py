"""Every build target and artifact format in one table: what differs from one target to the next is a field of
its row, and nothing else in the package names a target to decide something.

A target (`mlit-edge build --target NAME`, or `--frontend NAME` for a row with `frontend_of`) consumes one graph
flavour (export.flavours: the precision x graph table) and produces one format; the format's suffixes are the only
place a suffix says what a file is (the runtime adds each format's opener: `runtime.artifact`). The engine maps
`builder` to its build function (`engine.build.BUILDERS`), so this floor never names a module above it. A sidecar
records the row's `name` as its "target", its `graph` as its "runtime", its `module` as the engine's builder.

Data only, torch-free: the CLI, the schema and the device runtime all read it.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Mapping

GROUPED = "grouped"  # the portable attention: explicit matmuls, TensorRT-buildable, any runtime
# what `--target onnxruntime` builds: the fastest form of benchmarks/deploy_latency.py (docs/export-and-build.md)
ORT_ATTENTION = "onnx"


@dataclass(frozen=True)
class Flavour:
    """How one precision is made for one graph (the `runtime` a target consumes: its `graph`)."""

    precision: str
    runtime: str
    tag: str  # in the file name: mlit-xxs-TAG.onnx
    attention: str  # the fp32 export it starts from: the portable graph, or ONNX Runtime's fused one
    maker: str  # "export" (the fp32 graph itself), "fp16" casts, "int8-qdq" (TensorRT's recipe), "int8-static"
    # (ONNX Runtime's integer kernels); both INT8 makers calibrate
    about: str  # one line for the progress log
    # the OpenVINO inference precisions it runs at, the first the CPU plugin offers (OPTIMIZATION_CAPABILITIES); ()
    # where no OpenVINO runs it
    hints: tuple[str, ...] = ()


# each precision for each graph (export.flavours names and makes them; nothing else branches on the pair)
FLAVOURS: Mapping[tuple[str, str], Flavour] = MappingProxyType({(f.precision, f.runtime): f for f in (
    Flavour("fp32", "tensorrt", "fp32", GROUPED, "export", "the portable graph (TensorRT, any runtime)"),
    Flavour("fp16", "tensorrt", "fp16", GROUPED, "fp16", "LayerNorm, softmax, router and head stay fp32"),
    Flavour("int8", "tensorrt", "int8", GROUPED, "int8-qdq", "Q/DQ in TensorRT's recipe, calibrated"),
    Flavour("fp32", "onnxruntime", "fp32-ort", ORT_ATTENTION, "export", "ONNX Runtime's fused attention kernel"),
    # fp16 is a GPU format: on ONNX Runtime's CPU it runs through Casts, so it stays the portable graph
    Flavour("fp16", "onnxruntime", "fp16", GROUPED, "fp16", "LayerNorm, softmax, router and head stay fp32"),
    Flavour("int8", "onnxruntime", "int8-ort", ORT_ATTENTION, "int8-static",
            "int8 per-channel weights, activation scales fixed by calibration (the same logits in any batch)"),
    # OpenVINO reads ONNX Runtime's fused attention (opset 23's Attention) as its ScaledDotProductAttention, measured
    # faster than the portable graph at f32 and bf16 (docs/export-and-build.md): the same fp32 file, tag and all.
    # Its precision is the IR's inference hint, not a graph of its own ("export": the builder applies it)
    Flavour("fp32", "openvino", "fp32-ort", ORT_ATTENTION, "export", "ONNX Runtime's fused attention graph", ("f32",)),
    Flavour("fp16", "openvino", "fp16-ov", ORT_ATTENTION, "export",
            "the fp32 graph, computed by OpenVINO's CPU plugin in bf16 (or f16 where it has that instead)",
            ("bf16", "f16")),
)})
# every precision an artifact can carry, in the order the CLI lists them: fp32 (what every other is made from) first
PRECISIONS = tuple(dict.fromkeys(f.precision for f in FLAVOURS.values()))


@dataclass(frozen=True)
class Format:
    """An artifact file kind: its suffixes (the first is the one a build writes), what runs it and the Triton
    platform that serves it (None: Triton serves none)."""

    name: str
    title: str  # what runs it, in messages
    suffixes: tuple[str, ...]
    triton: str | None = None
    companions: tuple[str, ...] = ()  # the suffixes of the files beside it that are part of the artifact


FORMATS: Mapping[str, Format] = MappingProxyType({f.name: f for f in (
    Format("tensorrt", "TensorRT", (".plan", ".engine", ".trt"), "tensorrt_plan"),
    Format("onnxruntime", "ONNX Runtime", (".onnx",), "onnxruntime_onnx"),
    Format("openvino", "OpenVINO", (".xml",), companions=(".bin",)),  # the IR's weights, hashed in the sidecar
    Format("torch", "PyTorch", (".pt", ".pth", ".safetensors")),  # .safetensors: train.weights_file
)})


@dataclass(frozen=True)
class Target:
    """One build target: what it consumes, makes, builds with and who loads what it makes."""

    name: str  # --target NAME (--frontend NAME with frontend_of); the sidecar's "target"
    title: str  # in messages
    graph: str  # the graph flavour it consumes (export.flavours' runtime column); the sidecar's "runtime"
    format: str  # what it produces, a key of FORMATS: a .plan, or the ONNX itself
    builder: str | None = None  # how engine builds the artifact (engine.build.BUILDERS); None: the ONNX is it
    module: str | None = None  # the Python module that builds and runs it; the sidecar's engine builder module
    install: str = ""  # what to do where `module` does not import
    precisions: tuple[str, ...] = PRECISIONS
    parser_graph: bool = False  # TensorRT's ONNX parser reads its graph: a JetPack profile shapes and checks it, and
    # a graph made for ONNX Runtime's own kernels is refused
    versioned_profile: bool = False  # its module's version names a device profile (devices.profiles)
    strongly_typed_only: bool = False  # no builder flags, no fp32 pins: the graph's types are the engine's
    dla: bool = False  # places layers on a Jetson's DLA (where the machine has one)
    implicit_int8: bool = False  # builds calibrated INT8 from the fp32 graph (the DLA's INT8)
    frontend_of: str | None = None  # a frontend: builds this target's artifact from the PyTorch model
    consumers: tuple[str, ...] = ()  # the deploy stacks (stacks/) that load its artifact
    reads: tuple[str, ...] = ()  # other graphs (a sidecar's "runtime") its builder takes from --onnx as they are
    notes: Mapping[str, str] = field(default_factory=dict)  # said when a build makes that precision for it


TABLE: Mapping[str, Target] = MappingProxyType({t.name: t for t in (
    Target("tensorrt", "TensorRT", "tensorrt", "tensorrt", "onnx-parser", "tensorrt",
           "TensorRT comes with JetPack on Jetson, or `pip install tensorrt` with CUDA on x86; --target onnxruntime "
           "or --target tensorrt-rtx work on this machine", parser_graph=True, versioned_profile=True, dla=True,
           implicit_int8=True, consumers=("triton", "deepstream")),
    Target("tensorrt-rtx", "TensorRT-RTX", "tensorrt", "tensorrt", "onnx-parser", "tensorrt_rtx",
           "pip install 'mlit-edge[trt-check]'", parser_graph=True, strongly_typed_only=True),
    Target("onnxruntime", "ONNX Runtime", "onnxruntime", "onnxruntime", consumers=("triton",), notes={
        "fp16": "note: fp16 is not a speed format on a CPU: ONNX Runtime runs it through inserted Casts, no faster "
                "than fp32; it is built for TensorRT on the GPU (and to measure its accuracy here)"}),
    # int8 is not offered: OpenVINO runs the calibrated Q/DQ graph in int8, no faster than bf16 here
    # (docs/export-and-build.md)
    Target("openvino", "OpenVINO", "openvino", "openvino", "openvino-ir", "openvino",
           "pip install 'mlit-edge[openvino]'", ("fp32", "fp16"), reads=("onnxruntime",), notes={
               "fp16": "note: on OpenVINO, fp16 is the CPU plugin's half-width inference: bf16 where the CPU has it, "
                       "else f16; the IR's weights are stored in fp16"}),
    Target("torch-tensorrt", "torch-tensorrt", "tensorrt", "tensorrt", "torch-tensorrt", "tensorrt",
           "pip install torch-tensorrt on a CUDA workstation", ("fp32", "fp16"), frontend_of="tensorrt"),
)})
# the deploy stacks (stacks/) that load a built artifact, by name: what each is, in messages. A row's `consumers`
# names those that load its artifact
CONSUMERS = MappingProxyType({"deepstream": "DeepStream's nvinfer", "triton": "Triton's TensorRT backend"})
AUTO = ("tensorrt", "onnxruntime")  # what --target auto takes: the first whose module imports
TARGETS = ("auto", *(t.name for t in TABLE.values() if t.frontend_of is None))  # --target's choices
FRONTENDS = ("onnx", *(t.name for t in TABLE.values() if t.frontend_of is not None))  # --frontend's choices
GRAPHS = tuple(dict.fromkeys(t.graph for t in TABLE.values()))  # the graph flavours the targets consume
MODULES = {t.name: t.module for t in TABLE.values() if t.module and t.frontend_of is None}  # target -> module
DLA = tuple(t.name for t in TABLE.values() if t.dla and t.frontend_of is None)  # the targets a --dla-core build takes
PARSER_GRAPH = TABLE["tensorrt"].graph  # the portable graph: TensorRT's parser reads it, and every runtime runs it


def parser_reads(runtime: str) -> bool:
    """Whether TensorRT's ONNX parser reads a graph whose sidecar records `runtime` ("any": made for none)."""
    return runtime in ("any", PARSER_GRAPH)


def of_module(name: str) -> Target | None:
    """The target whose Python module is `name` (an imported TensorRT's __name__)."""
    return next((TABLE[n] for n, m in MODULES.items() if m == name), None)
