"""Heads padded to a fusable size (issue 36): the rules' choices, the exact padded graph, its sidecar, and the
fusion report of `mlit-edge check` on default, padded, INT8 and decomposed-LayerNorm graphs."""
import numpy as np
import pytest
import torch

pytest.importorskip("onnxruntime")

from mlit_edge.engine.check import format_report, static_checks  # noqa: E402
from mlit_edge.export.onnx_export import export_onnx  # noqa: E402
from mlit_edge.model.config import MLiTConfig  # noqa: E402
from mlit_edge.model.mlit import MLiT  # noqa: E402
from mlit_edge.devices.mha_rules import pad_choice, parse_pad  # noqa: E402
from mlit_edge.devices.profiles import PROFILES  # noqa: E402
from mlit_edge.artifacts.schema import SidecarError, check_record  # noqa: E402
from mlit_edge.artifacts.sidecar import read_sidecar  # noqa: E402

INFO = {"classes": [str(i) for i in range(5)], "preprocess": {"size": 12, "mean": [0.5] * 3, "std": [0.25] * 3},
        "model": {}}


def _head18() -> MLiT:
    """A 2-layer mLiT whose head size is mLiT-XXS's and S's: 18 (dim 36, 2 heads, GQA 2:1)."""
    torch.manual_seed(0)
    return MLiT(MLiTConfig(img_size=12, patch_size=3, num_classes=5, dim=36, depth=2, heads=2, groups=1,
                           hidden_first=16, hidden_last=8, expert_stages=(3, 4))).eval()


@pytest.fixture(scope="module")
def graphs(tmp_path_factory):
    """fp16 graphs of the head-18 model: as it is, padded to 24, and INT8 QDQ; and a JetPack 5.1 fp32 export."""
    from mlit_edge.export.fp16 import to_fp16
    from mlit_edge.export.precision import to_int8

    folder, model = tmp_path_factory.mktemp("fusion"), _head18()
    out = {}
    for name, pad in (("plain", None), ("padded", 24)):
        export_onnx(model, folder / f"{name}.onnx", INFO, pad_to=pad, pad_reason="test")
        to_fp16(folder / f"{name}.onnx", folder / f"{name}-fp16.onnx")
        out[name] = folder / f"{name}-fp16.onnx"
    calib = np.random.default_rng(0).standard_normal((8, 3, 12, 12)).astype(np.float32)
    to_int8(folder / "padded.onnx", folder / "int8.onnx", calib, {"name": "noise"}, batch=8)
    out["int8"], out["fp32"] = folder / "int8.onnx", folder / "padded.onnx"
    export_onnx(model, folder / "jp51.onnx", INFO, device=PROFILES["jetpack-5.1"])
    out["jp51"] = folder / "jp51.onnx"
    return out


def test_default_head_18_is_not_fusable_and_names_the_head_size_rule(graphs):
    rep = static_checks(graphs["plain"])
    assert len(rep.fusion) == 2 and not any(f["fusable"] for f in rep.fusion)
    assert all("head size 18" in f["failed"][0] and "multiple of 8" in f["failed"][0] for f in rep.fusion)
    assert "not an observation" in format_report(rep)


def test_padded_head_is_fusable_in_fp16_where_the_profile_fuses(graphs):
    rep = static_checks(graphs["padded"])
    assert all(f["fusable"] and f["head_size"] == 24 and f["dtype"] == "float16" for f in rep.fusion)
    older = static_checks(graphs["padded"], PROFILES["jetpack-6.0"])  # the verdict follows the profile
    assert not any(f["fusable"] for f in older.fusion) and "#3575" in older.fusion[0]["failed"][0]
    fp32 = static_checks(graphs["fp32"])  # fp32 matmuls: the type rule
    assert "float32" in fp32.fusion[0]["failed"][0]


def test_int8_qdq_graph_is_not_fusable_with_the_qdq_rule_named(graphs):
    rep = static_checks(graphs["int8"])
    assert rep.fusion and not any(f["fusable"] for f in rep.fusion)
    assert all(any(r.startswith("Q/DQ placement") and "after the softmax" in r for r in f["failed"]) for f in rep.fusion)
    assert all(any("INT8 fused attention needs 16, 32 or 64" in r for r in f["failed"]) for f in rep.fusion)  # 24


def test_layernorm_native_and_decomposed_are_reported(graphs):
    assert static_checks(graphs["plain"]).layernorm.startswith("5 LayerNormalization")
    decomposed = static_checks(graphs["jp51"], PROFILES["jetpack-5.1"])
    assert decomposed.layernorm.startswith("5 decomposed") and "LayerNormalization" not in decomposed.ops
    assert "fuses no attention" in decomposed.fusion[0]["failed"][0]  # TensorRT 8.5


def test_padded_export_is_exact_and_its_sidecar_says_why(graphs, tmp_path):
    rec = read_sidecar(graphs["fp32"])
    assert rec["attention"]["head_size"] == 18 and rec["attention"]["padded_to"] == 24
    assert rec["parity"]["max_abs_err"] <= 1e-5
    bad = {**rec, "attention": {**rec["attention"], "padded_to": 12}}
    with pytest.raises(SidecarError, match="attention.padded_to"):
        check_record(bad, graphs["fp32"])


@pytest.mark.parametrize("setting, runtime, trt, precisions, want", [
    ("auto", "tensorrt", "10", ("fp32", "fp16"), 24), ("auto", "tensorrt", "10.3", ("fp16",), 24),
    ("auto", "tensorrt", "10.13", ("fp16",), 24), ("auto", "tensorrt", "8.6", ("fp16",), None),
    ("auto", "tensorrt", "8.5", ("fp16",), None), ("auto", "tensorrt", "10.14", ("fp16",), None),
    ("auto", "tensorrt", "10.3", ("int8",), None), ("auto", "onnxruntime", None, ("fp32",), None),
    ("off", "tensorrt", "10.3", ("fp16",), None), ("32", "onnxruntime", None, ("fp32",), 32)])
def test_pad_choice_follows_the_profile(setting, runtime, trt, precisions, want):
    to, why = pad_choice(setting, 18, runtime, trt, precisions)
    assert to == want and why


@pytest.mark.parametrize("setting, message", [("20", "multiple of 8"), ("264", "16 to 256"), ("x", "auto, off"),
                                              ("8", "16 to 256")])
def test_pad_heads_refuses_bad_sizes_in_one_line(setting, message):
    with pytest.raises(ValueError, match=message):
        parse_pad(setting)
    with pytest.raises(ValueError, match="head size is 32"):
        pad_choice("24", 32, "tensorrt", "10.3")


@pytest.mark.slow  # real-size exports
@pytest.mark.parametrize("size", ["xs", "xxs"])
def test_padded_heads_are_exact_for_the_real_sizes(size, tmp_path):
    """The ONE real-size check: each head padded (XXS's 18 -> 24, XS's 16 -> 24), exported with the routing outputs:
    ONNX Runtime's logits within 1e-5 of the eval-mode PyTorch model and the same experts in every layer, at
    batch 1 and 8. S pads as XXS does (head 18, two query heads a group) on more layers; its unpadded graph is
    checked on every size in tests/export/test_export.py, and its export here cost 6-7 s a run."""
    from mlit_edge.export.source import load_for_export
    from mlit_edge.runtime.runners import OnnxRuntimeRunner

    torch.manual_seed(0)
    model, info = load_for_export(None, size, 10, random_weights=True)
    export_onnx(model, tmp_path / "m.onnx", info, probe=True, pad_to=24, pad_reason="test")
    with OnnxRuntimeRunner(tmp_path / "m.onnx") as run:
        for batch in (1, 8):
            x = np.random.default_rng(batch).standard_normal((batch, 3, 36, 36)).astype(np.float32)
            got = run.infer({"images": x})
            with torch.no_grad():
                logits, aux = model(torch.from_numpy(x), return_aux=True, sparse=True)
            err = float(np.abs(got["logits"] - logits.numpy()).max())
            print(f"{size} batch {batch}: max |dlogit| {err:.2e}")
            assert err <= 1e-5
            want = [e.numpy() for e in aux.experts]
            want[-1] = want[-1][:, -1:]  # the last layer routes the dummy token alone (export/last_token.py)
            assert all(np.array_equal(got[f"experts_{i}"], e) for i, e in enumerate(want))


def test_the_plan_pads_by_profile_and_the_cli_refuses_a_bad_size_in_one_line(tmp_path):
    from mlit_edge.export.requests import BuildRequest, ExportRequest
    from mlit_edge.export.resolve import resolve_plan
    from mlit_edge.export.source import Source
    from mlit_edge.artifacts.schema import ArtifactRecord
    from tests.helpers import run_cli

    source = Source(ArtifactRecord.from_json({"model": {"size": "xxs", "config": {"dim": 108, "heads": 6}}}))
    out = str(tmp_path / "m.onnx")
    assert resolve_plan(ExportRequest(out=out), source).pad_to == 24  # tensorrt-10
    assert resolve_plan(ExportRequest(out=out, jetpack="6.2"), source).pad_to == 24
    assert resolve_plan(ExportRequest(out=out, jetpack="5.1"), source).pad_to is None
    assert resolve_plan(ExportRequest(out=out, pad_heads="32"), source).pad_to == 32
    build = resolve_plan(BuildRequest(target="onnxruntime", precision="fp32", out=str(tmp_path)), source)
    assert build.pad_to is None and "ONNX Runtime" in build.pad_reason
    proc = run_cli("export", "--size", "xxs", "--pad-heads", "20", "--out", out, check=False)
    assert proc.returncode != 0 and "multiple of 8" in proc.stderr and "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
