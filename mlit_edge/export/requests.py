"""What the user asks of `mlit-edge export` and `mlit-edge build`, validated: the requests that
`export.resolve.resolve_plan` turns into one `BuildPlan`. The CLI takes its defaults and choices from
these dataclasses (`cli.common.default`), so each default lives here once.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..runtime.artifact import BATCH_PROFILE
from ..devices.mha_rules import parse_pad
from ..devices.profiles import JETPACKS, TENSORRTS, named_profile
from ..base.values import Flag, Float, Int, Ints, PathArg, Text, arg, validate
from ..artifacts.targets import TABLE
from . import FRONTENDS, OPSETS, PRECISIONS, TARGETS
from .calibration import DEFAULT_N, MIN_EXPERT_TOKENS
from ..artifacts.input_convention import NORMALISED, PIXELS, check_dtype

# A seed is 0 to 2^32 - 1: numpy's default_rng refuses a negative one, torch.manual_seed one past 2^64 (and the
# loader's per-epoch seed, seed * 1000003 + ..., must stay within it), both in the library's words and mid-run
SEED_MAX = 2 ** 32 - 1
MIN_WORKSPACE = 0.0625  # GiB (64 MiB): the smallest builder memory pool `build --workspace` has taken


@dataclass(frozen=True)
class ExportOptions:
    """What every export takes, for `mlit-edge export` and `mlit-edge build` alike (the CLI's --help
    explains each field); validated here."""

    checkpoint: str | None = arg(None, PathArg(optional=True))
    size: str | None = arg(None, Text(optional=True))
    num_classes: int = arg(10, Int(1))
    # None: the exporter's own (DEFAULT_OPSET), lowered to a device's parser; a given one is refused past it
    opset: int | None = arg(None, Int(OPSETS[0], OPSETS[-1], optional=True))
    batch: int | None = arg(None, Int(1, optional=True))
    # dataset, ImageFolder or recipe JSON; None: the model's dataset, else mnist5k
    calib_data: str | None = arg(None, PathArg(optional=True))
    calib_n: int = arg(DEFAULT_N, Int(1))
    calib_seed: int = arg(0, Int(0, SEED_MAX))
    calib_cache: str | None = arg(None, PathArg(optional=True))  # a folder; None disables the cache
    min_expert_tokens: int = arg(MIN_EXPERT_TOKENS, Int(1))
    data_root: str = arg("data", PathArg())
    evaluate: bool = arg(True, Flag(), "--eval")
    force: bool = arg(False, Flag())  # replace artifacts of another source (checkpoint, random weights) in the folder
    random_weights: bool = arg(False, Flag())  # no checkpoint: random weights even where a pretrained model ships
    jetpack: str | None = arg(None, Text(JETPACKS, optional=True))  # the device profile (devices.profiles)
    tensorrt: str | None = arg(None, Text(tuple(sorted(TENSORRTS)), optional=True))  # the same, by its TensorRT
    pad_heads: str = arg("auto", Text())  # auto, off or a head size N: heads zero-padded to it (mha_rules.pad_choice)
    raw_input: bool = arg(False, Flag())  # the normalisation folded into the graph: RGB pixels in [0, 255] (raw_input)
    input_dtype: str = arg("float32", Text())  # the pixels graph's input type: float32, or uint8 (export.uint8_input)
    progress: bool = arg(True, Flag())  # the long steps' progress on stderr (base.progress): a bar, or periodic lines

    def __post_init__(self) -> None:
        validate(self)  # types and ranges, in the CLI's words (base.values), before anything else reads them
        device = named_profile(self.jetpack, self.tensorrt)  # a one-line error for an unknown release
        if device is not None and self.opset is not None:  # the named device's, before any work
            device.refuse_opset(self.opset)
        parse_pad(self.pad_heads)  # auto, off or a fusable head size; against the model's own in resolve_plan
        if self.size is not None and self.size != self.size.lower():
            raise ValueError(f"--size {self.size!r}: sizes are lower case")
        if self.random_weights and self.checkpoint:
            raise ValueError("--random-weights builds without weights: drop --checkpoint, or it")
        try:
            check_dtype(PIXELS if self.raw_input else NORMALISED, self.input_dtype)
        except ValueError as e:
            raise ValueError(f"--input-dtype {self.input_dtype}: {e}") from None


@dataclass(frozen=True)
class ExportRequest(ExportOptions):
    """`mlit-edge export`: the fp32 ONNX at `out` and the variants asked for beside it (TensorRT's flavour)."""

    out: str = arg("model.onnx", PathArg())
    probe: bool = arg(False, Flag())
    precisions: tuple[str, ...] = ("fp32",)

    def __post_init__(self) -> None:
        super().__post_init__()
        if isinstance(self.precisions, str) or not all(isinstance(p, str) for p in self.precisions):
            raise TypeError(f"--precision {self.precisions!r}: expected a tuple of names, e.g. ('fp16', 'int8')")
        object.__setattr__(self, "precisions", tuple(self.precisions))
        bad = [p for p in self.precisions if p not in PRECISIONS]
        if bad or not self.precisions:
            raise ValueError(f"--precision {','.join(self.precisions)!r}: choose from {', '.join(PRECISIONS)}")
        if not self.out_folder and not self.out.endswith(".onnx"):
            raise ValueError(f"--out {self.out}: the fp32 export's name must end in .onnx (or name a folder)")

    @property
    def out_folder(self) -> bool:
        """Whether `out` names a folder (a folder, or a name without a suffix), where the files are named as
        `build` names them, rather than the fp32 export's file."""
        return Path(self.out).is_dir() or not Path(self.out).suffix


@dataclass(frozen=True)
class BuildRequest(ExportOptions):
    """`mlit-edge build`: the export stage's options plus what the engine step takes (the CLI's --help
    explains each field); validated here."""

    precision: str = arg("fp16", Text())
    onnx: str | None = arg(None, PathArg(optional=True))
    target: str = arg("auto", Text())
    frontend: str = arg("onnx", Text())
    # MIN, OPT, MAX; None: BATCH_PROFILE
    dynamic_batch: tuple[int, int, int] | None = arg(None, Ints(1, 3, optional=True, example="1,8,64"))
    workspace: float = arg(1.0, Float(MIN_WORKSPACE))  # GiB
    timing_cache: str | None = arg(None, PathArg(optional=True))
    dla_core: int | None = arg(None, Int(0, optional=True))
    out: str = arg("artifacts", PathArg())

    def __post_init__(self) -> None:
        super().__post_init__()
        choices = {"precision": PRECISIONS, "target": TARGETS, "frontend": FRONTENDS}
        for name, allowed in choices.items():
            if getattr(self, name) not in allowed:
                raise ValueError(f"--{name} {getattr(self, name)!r}: choose from {', '.join(map(str, allowed))}")
        for flag, row in (("--frontend", TABLE.get(self.frontend)), ("--target", TABLE.get(self.target))):
            if row is not None and self.precision not in row.precisions:
                raise ValueError(f"{flag} {row.name} builds {' and '.join(row.precisions)}, not {self.precision}; "
                                 + ("INT8 goes through the calibrated ONNX (drop --frontend)" if row.frontend_of else
                                    "choose another --target"))
        if self.batch is not None and self.dynamic_batch is not None:
            raise ValueError("give --batch or --dynamic-batch, not both")
        lo, opt, hi = self.profile
        if not 1 <= lo <= opt <= hi:
            raise ValueError(f"--dynamic-batch {lo},{opt},{hi}: need 1 <= MIN <= OPT <= MAX")
        if self.onnx and self.checkpoint:
            raise ValueError("give --checkpoint or --onnx, not both")
        if self.random_weights and self.onnx:
            raise ValueError("--random-weights builds without weights: drop --onnx, or it")
        compiles = self.frontend != FRONTENDS[0]  # every frontend but the ONNX parser's compiles the PyTorch model
        if self.raw_input and compiles:
            raise ValueError(f"--raw-input folds the normalisation into the ONNX graph; the {self.frontend} frontend "
                             f"compiles the PyTorch model: build with --frontend {FRONTENDS[0]}")
        if self.raw_input and self.onnx:
            raise ValueError("--raw-input shapes an export from a checkpoint; an --onnx keeps its own input (export "
                             "it again with --raw-input, then build that)")
        if self.onnx and compiles:
            raise ValueError(f"--frontend {self.frontend} compiles the PyTorch model; it cannot start from --onnx")

    @property
    def profile(self) -> tuple[int, int, int]:
        return self.dynamic_batch or BATCH_PROFILE

    @property
    def dla_int8(self) -> bool:
        """The DLA's calibrated INT8: TensorRT's builder quantizes the fp32 graph (engine/dla_int8.py), so the
        export is fp32 and the engine INT8."""
        return self.dla_core is not None and self.precision == "int8"
