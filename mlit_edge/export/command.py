"""`mlit-edge export`: the fp32 ONNX of a checkpoint, checked against PyTorch, and the variants asked for."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from . import DEFAULT_OPSET, OPSETS, PRECISIONS
from .variants import make_variant, variant_path


@dataclass(frozen=True)
class ExportRequest:
    """What `mlit-edge export` takes (the CLI's --help explains each field); validated here."""

    checkpoint: str | None = None
    size: str | None = None
    num_classes: int = 10
    out: str = "model.onnx"
    opset: int = DEFAULT_OPSET
    batch: int | None = None
    probe: bool = False
    precisions: tuple[str, ...] = ("fp32",)
    calib_data: str | None = None
    calib_n: int = 512
    data_root: str = "data"
    force: bool = False  # replace files of another source (checkpoint, random weights)
    random_weights: bool = False  # no checkpoint: random weights even where a pretrained model ships

    def __post_init__(self) -> None:
        bad = [p for p in self.precisions if p not in PRECISIONS]
        if bad or not self.precisions:
            raise ValueError(f"--precision {','.join(self.precisions)!r}: choose from {', '.join(PRECISIONS)}")
        if self.opset not in OPSETS:
            raise ValueError(f"--opset {self.opset}: choose from {', '.join(map(str, OPSETS))}")
        if self.batch is not None and self.batch < 1:
            raise ValueError("--batch must be at least 1")
        if not self.out.endswith(".onnx"):
            raise ValueError(f"--out {self.out}: the fp32 export's name must end in .onnx")


def run_export(req: ExportRequest, log: Callable[[str], None] = print) -> list[Path]:
    """The fp32 export, checked against PyTorch, and the variants asked for beside it; returns their paths."""
    from ..runtime.outputs import guard_replace, output_folder
    from .calibration import resolve_recipe
    from .onnx_export import export_onnx
    from ..train.pretrained import weights_banner
    from .source import load_for_export

    out = Path(req.out)
    if not out.parent.is_dir():
        raise FileNotFoundError(f"output folder {out.parent} does not exist")
    model, info = load_for_export(req.checkpoint, req.size, req.num_classes, req.random_weights)
    banner = weights_banner(info, bool(req.checkpoint))
    if banner:
        log(banner)
    variants = [p for p in ("fp16", "int8") if p in req.precisions]
    with output_folder(out.parent, log):
        for path in [out] + [variant_path(out, p) for p in variants]:
            guard_replace(path, info, req.force)
        rec = export_onnx(model, out, info, opset=req.opset, batch=req.batch, probe=req.probe)
        log(f"{out}: fp32, opset {req.opset}, batch {rec['batch']}, ONNX Runtime vs PyTorch max abs error "
            f"{rec['parity']['max_abs_err']:.2e}")
        paths = [out]
        recipe = resolve_recipe(req.calib_data, req.calib_n, 0, info["preprocess"]["dataset"])
        for precision in variants:
            variant = make_variant(out, precision, model, recipe, req.data_root, log=log)  # TensorRT's flavour
            parity = variant.record["parity"]
            log(f"{variant.path}: {precision}; vs PyTorch on {parity['images']} held-out images: top-1 agreement "
                f"{parity['top1_agreement']:.4f}, max abs error {parity['max_abs_err']:.2e}")
            paths.append(variant.path)
    return paths
