"""`mlit-edge build --target openvino`: the export stage's ONNX as an OpenVINO IR (X.xml and its weights X.bin, written by
`openvino.save_model`), at the inference precision the flavour asks for and this CPU's plugin offers, measured through
OpenVINO itself against PyTorch (logits, top-1, each layer's expert agreement) and on the held-out split.

The precision is the IR's inference hint, not a graph of its own: the flavour's `hints` (artifacts.targets.FLAVOURS)
list the types it runs at, and the first that the CPU plugin's OPTIMIZATION_CAPABILITIES names is taken (fp32: f32;
fp16: bf16, else f16). The sidecar beside the .xml records the hint, the build CPU and the sha256 of the .bin; the
runtime (runtime/ov_runner.py) checks them before OpenVINO reads either file. Named so as not to shadow `openvino`.
"""
from __future__ import annotations

import logging
import os
import tempfile
from pathlib import Path
from typing import Any

from ..artifacts.schema import ArtifactRecord
from ..artifacts.sidecar import current_umask, publish, sha256_file, user_fields
from ..artifacts.targets import FLAVOURS
from ..export.handoff import HeldOut, Variant
from ..export.requests import BuildRequest
from ..export.resolve import BuildPlan
from ..export.variants import evaluate_runner, routing_report, top1_of
from ..base.messages import log_lines
from ..runtime.ov_runner import CAPABILITY, OpenVINORunner, cpu_capabilities, import_openvino, weights_path
from ..runtime.runners import predict_all

logger = logging.getLogger(__name__)

# the source ONNX's fields that say how ONNX Runtime runs it, or what it measured there: the IR measures its own
NOT_CARRIED = ("onnxruntime", "inputs", "outputs", "parity", "accuracy")


def require_openvino() -> None:
    """Refuse, before any work, a build where OpenVINO does not import."""
    import_openvino()


def choose_hint(hints: tuple[str, ...], capabilities: list[str], precision: str) -> str:
    """The first of the flavour's inference precisions that this CPU's plugin offers; a one-line error if none."""
    for hint in hints:
        if CAPABILITY[hint] in capabilities:
            return hint
    raise ValueError(f"--precision {precision} on OpenVINO computes in {' or '.join(hints)}, and this CPU's plugin "
                     f"offers neither (it offers {', '.join(capabilities)}): build --precision fp32")


def measure_ir(runner: OpenVINORunner, plan: BuildPlan, model, record: ArtifactRecord, precision: str) -> dict:
    """The IR's `parity` against PyTorch (with the model) and `accuracy` on the held-out split, through OpenVINO."""
    out: dict[str, Any] = {}
    if not (plan.torch and plan.dataset):
        return out
    held_out = HeldOut(plan.dataset)
    pre = record.preprocess
    normalisation = (pre.mean, pre.std) if pre else (held_out.split.mean, held_out.split.std)
    got = None
    with runner:
        if model is not None:  # a PyTorch model: onnx_export (torch) is loaded here, not by the build's import
            from ..export.onnx_export import parity_of

            images = held_out.sample()
            got, routes = predict_all(runner, images, routes=True, normalised=normalisation)
            out["parity"] = parity = {**parity_of(got, routes, model, images),
                                      "measured_with": f"OpenVINO CPU, {runner.settings.get('inference_precision')}"}
            logger.info(f"      vs PyTorch on {parity['images']} held-out images: top-1 agreement "
                        f"{parity['top1_agreement']:.4f}, max abs logit error {parity['max_abs_err']:.2e}")
            log_lines(logger, routing_report(parity, precision))
        if plan.evaluate and not record.random_weights:
            # the parity run's logits when it covered the whole split (fed the same way): one pass, not two
            out["accuracy"] = acc = (top1_of(got, held_out) if got is not None and held_out.sample_is_split()
                                     else evaluate_runner(runner, held_out, 64, normalisation))
            logger.info(f"[build] top-1 on {acc['dataset']} test ({acc['images']} images, OpenVINO): {acc['top1']:.4f}")
    return out


def openvino_ir(req: BuildRequest, plan: BuildPlan, model, final: Variant, trt=None) -> ArtifactRecord:
    """Write `plan.engine` (the .xml) and its .bin from the exported `final`, measured, with its sidecar; returns
    the record as published. The .bin goes into place first: a kill before the .xml leaves the old IR's sidecar,
    whose weights hash then refuses the new .bin rather than run a mix."""
    ov = import_openvino()
    assert plan.engine is not None
    core = ov.Core()
    capabilities = cpu_capabilities(core)
    hint = choose_hint(FLAVOURS[(req.precision, plan.runtime)].hints, capabilities, req.precision)
    reduced = hint != "f32"
    ir = core.read_model(str(final.path))
    if plan.batch:  # --batch N: the IR's input is static, as the ONNX's is
        dims = ir.inputs[0].get_partial_shape()
        ir.reshape({ir.inputs[0]: [plan.batch, *(dims[i].get_length() for i in range(1, len(dims)))]})
    logger.info(f"[build] OpenVINO {ov.__version__.split('-')[0]}: IR of {final.path.name}, inference precision {hint} "
                f"(this CPU's plugin offers {', '.join(capabilities)}){', weights stored in fp16' if reduced else ''}")
    # hidden temporaries ending in .tmp, which a later build under the folder's lock removes after a kill
    # (artifacts.outputs); save_model writes .xml and .bin, renamed to them at once
    fd, name = tempfile.mkstemp(prefix=f".{plan.engine.name}.", suffix=".tmp", dir=plan.engine.parent)
    os.close(fd)
    tmp, saved = Path(name), Path(name).with_suffix(".xml")
    tmp_bin = tmp.with_suffix(".bin.tmp")
    try:
        ov.save_model(ir, str(saved), compress_to_fp16=reduced)
        os.replace(saved, tmp)
        os.replace(weights_path(saved), tmp_bin)
        for f in (tmp, tmp_bin):
            os.chmod(f, 0o666 & ~current_umask())
        fields = {k: v for k, v in user_fields(final.record.to_json()).items() if k not in NOT_CARRIED}
        bin_path = weights_path(plan.engine)
        fields.update(precision=req.precision, runtime=plan.runtime, target=plan.target, kind="openvino-ir",
                      source_onnx=final.path.name, source_onnx_sha256=final.sha256,
                      openvino={"version": ov.__version__, "inference_precision": hint,
                                "weights": bin_path.name, "weights_sha256": sha256_file(tmp_bin),
                                "weights_fp16": reduced,
                                "cpu": {"name": str(core.get_property("CPU", "FULL_DEVICE_NAME")),
                                        "capabilities": capabilities}})
        if plan.batch:
            fields["batch"] = plan.batch
        runner = OpenVINORunner(tmp, hint=hint, expose_routing=True,
                                content=(tmp.read_bytes(), tmp_bin.read_bytes()))
        fields.update(measure_ir(runner, plan, model, ArtifactRecord.from_json(fields), req.precision))
        os.replace(tmp_bin, bin_path)
        record = ArtifactRecord.from_json(publish(tmp, plan.engine, fields))
    finally:
        for f in (tmp, tmp_bin, saved, weights_path(saved)):
            f.unlink(missing_ok=True)
    logger.info(f"      {plan.engine} + {bin_path.name}: {((record.nbytes or 0) + bin_path.stat().st_size) / 1e6:.2f} MB "
                f"(+ {plan.engine.name}.json)")
    return record
