"""What the user asks of `mlit-edge export` and `mlit-edge build`, validated: the requests that
`export.resolve.resolve_plan` turns into one `BuildPlan`. The CLI takes its defaults and choices from
these dataclasses (`cli.common.default`), so each default lives here once.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..runtime.artifact import BATCH_PROFILE
from ..runtime.mha_rules import parse_pad
from ..runtime.profiles import named_profile
from . import DEFAULT_OPSET, FRONTENDS, OPSETS, PRECISIONS, TARGETS
from .calibration import DEFAULT_N, MIN_EXPERT_TOKENS


@dataclass(frozen=True)
class ExportOptions:
    """What every export takes, for `mlit-edge export` and `mlit-edge build` alike (the CLI's --help
    explains each field); validated here."""

    checkpoint: str | None = None
    size: str | None = None
    num_classes: int = 10
    opset: int = DEFAULT_OPSET
    batch: int | None = None
    calib_data: str | None = None  # dataset, ImageFolder or recipe JSON; None: the model's dataset, else mnist5k
    calib_n: int = DEFAULT_N
    calib_seed: int = 0
    calib_cache: str | None = None  # a folder; None disables the cache
    min_expert_tokens: int = MIN_EXPERT_TOKENS
    data_root: str = "data"
    evaluate: bool = True
    force: bool = False  # replace artifacts of another source (checkpoint, random weights) in the output folder
    random_weights: bool = False  # no checkpoint: random weights even where a pretrained model ships
    jetpack: str | None = None  # the device profile (runtime.profiles): JetPack 5.1, 6.0, 6.1, 6.2 or 7
    tensorrt: str | None = None  # the same, named by JetPack's TensorRT: 8.5, 8.6, 10.3 or 10.13
    pad_heads: str = "auto"  # auto, off or a head size N: each head zero-padded to it (runtime.mha_rules.pad_choice)
    raw_input: bool = False  # the normalisation folded into the graph: it takes RGB pixels in [0, 255] (export.raw_input)
    input_dtype: str = "float32"  # the pixels graph's input type: float32, or uint8 through a Cast (export.uint8_input)

    def __post_init__(self) -> None:
        named_profile(self.jetpack, self.tensorrt)  # a one-line error for an unknown release
        parse_pad(self.pad_heads)  # auto, off or a fusable head size; against the model's own in resolve_plan
        if self.opset not in OPSETS:
            raise ValueError(f"--opset {self.opset!r}: choose from {', '.join(map(str, OPSETS))}")
        if self.batch is not None and self.batch < 1:
            raise ValueError("--batch must be at least 1")
        if self.size is not None and self.size != self.size.lower():
            raise ValueError(f"--size {self.size!r}: sizes are lower case")
        for name in ("calib_n", "min_expert_tokens", "num_classes"):
            if getattr(self, name) < 1:
                raise ValueError(f"--{name.replace('_', '-')} must be at least 1")
        if self.random_weights and self.checkpoint:
            raise ValueError("--random-weights builds without weights: drop --checkpoint, or it")
        from ..runtime.input_convention import NORMALISED, PIXELS, check_dtype

        try:
            check_dtype(PIXELS if self.raw_input else NORMALISED, self.input_dtype)
        except ValueError as e:
            raise ValueError(f"--input-dtype {self.input_dtype}: {e}") from None


@dataclass(frozen=True)
class ExportRequest(ExportOptions):
    """`mlit-edge export`: the fp32 ONNX at `out` and the variants asked for beside it (TensorRT's flavour)."""

    out: str = "model.onnx"
    probe: bool = False
    precisions: tuple[str, ...] = ("fp32",)

    def __post_init__(self) -> None:
        super().__post_init__()
        bad = [p for p in self.precisions if p not in PRECISIONS]
        if bad or not self.precisions:
            raise ValueError(f"--precision {','.join(self.precisions)!r}: choose from {', '.join(PRECISIONS)}")
        if not self.out.endswith(".onnx"):
            raise ValueError(f"--out {self.out}: the fp32 export's name must end in .onnx")


@dataclass(frozen=True)
class BuildRequest(ExportOptions):
    """`mlit-edge build`: the export stage's options plus what the engine step takes (the CLI's --help
    explains each field); validated here."""

    precision: str = "fp16"
    onnx: str | None = None
    target: str = "auto"
    frontend: str = "onnx"
    dynamic_batch: tuple[int, int, int] | None = None  # MIN, OPT, MAX; None: BATCH_PROFILE
    workspace: float = 1.0  # GiB
    timing_cache: str | None = None
    dla_core: int | None = None
    out: str = "artifacts"

    def __post_init__(self) -> None:
        super().__post_init__()
        choices = {"precision": PRECISIONS, "target": TARGETS, "frontend": FRONTENDS}
        for name, allowed in choices.items():
            if getattr(self, name) not in allowed:
                raise ValueError(f"--{name} {getattr(self, name)!r}: choose from {', '.join(map(str, allowed))}")
        if self.batch is not None and self.dynamic_batch is not None:
            raise ValueError("give --batch or --dynamic-batch, not both")
        lo, opt, hi = self.profile
        if not 1 <= lo <= opt <= hi:
            raise ValueError(f"--dynamic-batch {lo},{opt},{hi}: need 1 <= MIN <= OPT <= MAX")
        if self.onnx and self.checkpoint:
            raise ValueError("give --checkpoint or --onnx, not both")
        if self.random_weights and self.onnx:
            raise ValueError("--random-weights builds without weights: drop --onnx, or it")
        if self.raw_input and self.frontend == "torch-tensorrt":
            raise ValueError("--raw-input folds the normalisation into the ONNX graph; the torch-tensorrt frontend "
                             "compiles the PyTorch model: build with --frontend onnx")
        if self.raw_input and self.onnx:
            raise ValueError("--raw-input shapes an export from a checkpoint; an --onnx keeps its own input (export "
                             "it again with --raw-input, then build that)")
        if self.onnx and self.frontend == "torch-tensorrt":
            raise ValueError("--frontend torch-tensorrt compiles the PyTorch model; it cannot start from --onnx")
        if self.workspace <= 0:
            raise ValueError("--workspace must be positive (GiB)")

    @property
    def profile(self) -> tuple[int, int, int]:
        return self.dynamic_batch or BATCH_PROFILE
