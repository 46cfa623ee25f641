"""Where TensorRT runs attention as one fused kernel, by NVIDIA's documented rules: the one place that both
`--pad-heads auto` (export) and the fusion report of `mlit-edge check` (engine.fusion) read them.

Everything here is a prediction from documents and NVIDIA developers' answers, never an observation: no
TensorRT runs on this machine, and TensorRT "may decide not to fuse an MHA graph into a single kernel based
on performance evaluation or other constraints" (the guide's own caveat). The sources, cited again at each rule:

- DG: the TensorRT Developer Guide, section "Multi-Head Attention Fusion"
  (docs.nvidia.com/deeplearning/tensorrt/developer-guide/index.html#mha-fusion), its list of restrictions as
  quoted for TensorRT 10.x in NVIDIA/TensorRT#2981 and #4167 (2024-09-28, the JetPack 6.1 / TensorRT 10.3 thread).
- RN-10.14.1: the TensorRT 10.14.1 release notes, "Enhanced MHA Fusions ... when the head size does not meet
  the alignment requirements by padding it automatically": from 10.14 TensorRT pads itself.
- NVIDIA/TensorRT#2736 (nvpohanh, 2023-03-08, TensorRT 8.5.3: "This support will be added in TRT 8.6") and #3280
  (nvpohanh, 2023-09-05: "You will need TensorRT 8.6 to get those fusions"): TensorRT 8.5 fuses no MHA from ONNX.
- NVIDIA/TensorRT#3575 (TensorRT 8.6.10 of DRIVE OS 6.0.7.0 on Orin: no MHA kernel; zerollzeng: "expected ... the
  fused mha kernel doesn't enable in TRT 8.6") and #3643 (an Orin NX thread; nvpohanh, 2024-02-02: "Orin fused MHA
  kernels were added in TensorRT 8.6.11/12, I think. TRT 8.6.1 does not have it"). Those are the only NVIDIA
  statements about 8.6 on Orin found, and they name 8.6.10 (DRIVE OS's), 8.6.11/12 (the same 8.6.1x numbering)
  and the desktop's 8.6.1: other release streams than JetPack 6.0's 8.6.2, which no NVIDIA source says fuses or
  not. So 8.6.2 is not predicted to fuse, and the report says it is a prediction; one user in #3643 reports flash
  attention with 8.6.2 (dustynv/l4t-pytorch:r36.2.0): a report, so `--pad-heads 24` lets that be tried.
- NVIDIA/TensorRT#4167: TensorRT 10.3 on Orin (JetPack 6.1) fused FP16 (`_gemm_mha_v2`) but not INT8.

Stdlib only and Python 3.8 syntax (the device's Python imports the runtime).
"""
from __future__ import annotations

import re

from typing import Dict, Optional, Tuple

from ..artifacts.targets import PARSER_GRAPH
from .profiles import JETPACK_TABLE

MIN_SM = 75  # DG: "SM version must be >= 75"
FP16_MIN, FP16_MAX, FP16_ALIGN = 16, 256, 8  # DG: "16 <= H <= 256 and H % 8 == 0 for FP16 and BF16"
INT8_HEADS = (16, 32, 64)  # DG: "Head size must be 16, 32, or 64 ... for INT8"
INT8_MAX_SEQ = 512  # DG: "sequence lengths (S_q, S_kv) must be <= 512 for INT8"
FUSED_TYPES = ("float16", "bfloat16", "int8")  # DG: the two batched matmuls' inputs "must be FP16, INT8 ... or BF16"
PAD_SETTINGS = ("auto", "off")  # or a head size N
# the Jetson GPUs of each JetPack and their compute capability x 10, from jetpacks.json's "modules" (its sources:
# NVIDIA's CUDA GPUs table for Xavier 7.2 and Orin 8.7; CUDA 13.0's release notes for Thor, SM 11.0 since CUDA 13
# renumbered SM 10.1 as 11.0): the SM rule is decided per profile
JETSON_SM: Dict[str, Tuple[Tuple[str, int], ...]] = {
    jetpack: tuple((name, int(sm)) for name, sm in row["modules"].items()) for jetpack, row in JETPACK_TABLE.items()}


def _major_minor(tensorrt: str) -> Tuple[int, int]:
    parts = (str(tensorrt).split(".") + ["0"])[:2]
    return int(parts[0]), int(parts[1])


def version_rule(tensorrt: str) -> Optional[str]:
    """Why TensorRT `tensorrt` (major.minor, or "10" for any 10.x) fuses no attention from an ONNX graph, or
    None where it does."""
    version = _major_minor(tensorrt)
    if version < (8, 6):  # NVIDIA/TensorRT#2736, #3280 (NVIDIA): MHA fusion from ONNX came with 8.6
        return f"TensorRT {tensorrt} fuses no attention from an ONNX graph (NVIDIA/TensorRT#2736, #3280: it came in 8.6)"
    if version < (10, 0):  # #3575, #3643: NVIDIA on DRIVE OS's 8.6.10-12, nothing on JetPack 6.0's 8.6.2
        return (f"TensorRT {tensorrt} is not predicted to fuse attention on Orin: the only NVIDIA statements about 8.6 "
                "on Orin are about DRIVE OS's 8.6.10-12 (NVIDIA/TensorRT#3575, #3643); no NVIDIA source says JetPack "
                "6.0's 8.6.2 fuses")
    return None


def sm_rule(jetpack: Optional[str]) -> Tuple[Optional[str], str]:
    """(failure, note) of DG's "SM version must be >= 75" for the profile's GPUs: a failure where none of its
    Jetsons meets it, a note where some do not or the GPU is not known (a desktop TensorRT)."""
    if jetpack is None:
        return None, f"needs a GPU of SM >= {MIN_SM} (Turing or newer; DG), not known for a desktop profile"
    gpus = JETSON_SM.get(jetpack, ())
    low = [f"{name} (SM {sm / 10:.1f})" for name, sm in gpus if sm < MIN_SM]
    high = [f"{name} (SM {sm / 10:.1f})" for name, sm in gpus if sm >= MIN_SM]
    if not high:
        return f"SM >= {MIN_SM} (DG): JetPack {jetpack}'s GPUs are below it", ""
    return None, (f"SM >= {MIN_SM} (DG): met on {', '.join(high)}" + (f", not on {', '.join(low)}" if low else ""))


def head_rule(head: int, dtype: str) -> Optional[str]:
    """Why a head size `head` cannot fuse in `dtype` ("float16", "bfloat16" or "int8"), or None where it can."""
    if dtype == "int8":  # DG: INT8 head sizes
        return None if head in INT8_HEADS else (f"head size {head}: INT8 fused attention needs 16, 32 or 64 (DG)")
    if FP16_MIN <= head <= FP16_MAX and head % FP16_ALIGN == 0:  # DG: FP16/BF16 head sizes
        return None
    return f"head size {head}: FP16/BF16 fused attention needs {FP16_MIN}-{FP16_MAX} and a multiple of {FP16_ALIGN} (DG)"


def fusable_head(head: int) -> int:
    """The nearest head size at or above `head` that DG's FP16/BF16 rule takes (18 -> 24, 10 -> 16)."""
    size = max(head, FP16_MIN)
    size += -size % FP16_ALIGN
    if size > FP16_MAX:
        raise ValueError(f"head size {head}: no fusable head size at or above it (DG: at most {FP16_MAX})")
    return size


def parse_pad(setting: str) -> Optional[int]:
    """`--pad-heads` as given: None for auto/off, else the head size N (a one-line error for anything else)."""
    if setting in PAD_SETTINGS:
        return None
    if not re.fullmatch(r"[0-9]{1,6}", str(setting)):  # str.isdigit() takes '²', which int() then refuses
        raise ValueError(f"--pad-heads {setting!r}: choose auto, off or a head size N (a multiple of 8, 16 to 256)")
    n = int(setting)
    if n % FP16_ALIGN or not FP16_MIN <= n <= FP16_MAX:
        raise ValueError(f"--pad-heads {n}: a head size must be a multiple of {FP16_ALIGN} from {FP16_MIN} to {FP16_MAX} "
                         "(the FP16 fused-attention rule, TensorRT Developer Guide)")
    return n


def pad_choice(setting: str, head: int, runtime: str, tensorrt: Optional[str],
               precisions: Tuple[str, ...] = ("fp32",)) -> Tuple[Optional[int], str]:
    """(the head size to pad each head's Q, K and V to, or None; why) for `--pad-heads setting`, a model of
    head size `head`, the artifacts' runtime, the profile's TensorRT (None: ONNX Runtime) and the precisions
    made from the one fp32 export."""
    n = parse_pad(setting)
    if n is not None:
        if n < head:
            raise ValueError(f"--pad-heads {n}: the model's head size is {head}; pad to {head} or more")
        return (n if n > head else None), f"--pad-heads {n}"
    if setting == "off":
        return None, "--pad-heads off"
    if runtime != PARSER_GRAPH or tensorrt is None:  # benchmarks/pad_heads.py: no faster on ONNX Runtime's CPU
        return None, ("auto: not for ONNX Runtime (its CPU kernels were measured no faster with padded heads: "
                      "benchmarks/pad_heads.py, docs/export-and-build.md)")
    why_not = version_rule(tensorrt)
    if why_not:
        return None, f"auto: {why_not}"
    if precisions == ("int8",):  # DG: INT8 fusion needs Q/DQ around both matmuls and the softmax
        return None, ("auto: INT8 fused attention needs Q/DQ before the first matmul, after the softmax and after "
                      "the second (DG); this INT8 keeps attention's matmuls in float, so padding buys nothing")
    if head_rule(head, "float16") is None:
        return None, f"auto: head size {head} already meets the FP16 fused-attention rule (DG)"
    if _major_minor(tensorrt) >= (10, 14):  # RN-10.14.1: TensorRT pads a misaligned head itself
        return None, f"auto: TensorRT {tensorrt} pads a misaligned head itself (10.14.1 release notes)"
    to = fusable_head(head)
    return to, (f"auto: TensorRT {tensorrt}'s FP16 fused attention needs a head size of {FP16_MIN}-{FP16_MAX}, a "
                f"multiple of {FP16_ALIGN} (TensorRT Developer Guide, MHA fusion); {head} -> {to}, zeros only")
