"""export/last_token.py: the last layer for the dummy token alone, in the portable (TensorRT) graph as in the
ONNX Runtime one: the same function as the graph that keeps every token, one token's routing in the last
layer, and the INT8 routing report and agreement reading that layer on the one token it routes."""
import numpy as np
import pytest
import torch

pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

from mlit_edge.export.last_token import LastTokenAttention  # noqa: E402
from mlit_edge.export.onnx_export import variant_parity  # noqa: E402
from mlit_edge.export.precision import to_int8  # noqa: E402
from mlit_edge.export.static import StaticAttention, to_deploy  # noqa: E402
from mlit_edge.export.variants import routing_report  # noqa: E402
from mlit_edge.base.routing import routing_agreement  # noqa: E402
from tests.helpers import export_tiny, tiny_model  # noqa: E402


def test_the_pruned_portable_graph_is_the_full_one_with_biases(tiny_cfg):
    """Non-zero QKV and output biases (a dropped one would show), batch 1 and 8: the pruned graph's logits are
    the full graph's, and its last layer routes the dummy token as the full graph does."""
    from mlit_edge.model.mlit import MLiT

    model = MLiT(tiny_cfg.replace(attn_bias=True)).eval()
    with torch.no_grad():
        for blk in model.blocks:
            blk.attn.qkv.bias.normal_(0, 0.5)
            blk.attn.proj.bias.normal_(0, 0.5)
    pruned, full = to_deploy(model, probe=True), to_deploy(model, probe=True, prune_last=False)
    assert isinstance(pruned.blocks[-1].attn, LastTokenAttention) and isinstance(full.blocks[-1].attn, StaticAttention)
    for b in (1, 8):
        x = torch.randn(b, 3, tiny_cfg.img_size, tiny_cfg.img_size)
        with torch.no_grad():
            (lp, *rp), (lf, *rf) = pruned(x), full(x)
        assert (lp - lf).abs().max() <= 1e-5
        assert [r.shape[1] for r in rp] == [tiny_cfg.num_tokens] * (tiny_cfg.depth - 1) + [1]
        assert torch.equal(rp[-1], rf[-1][:, -1:]) and all(torch.equal(a, c) for a, c in zip(rp[:-1], rf[:-1]))


@pytest.mark.slow  # an export, a calibration and two ONNX Runtime passes: about 40 s on one shared core
def test_int8_routing_report_reads_the_one_token_layer(tmp_path):
    """The QDQ INT8 variant of the pruned portable graph: its routing outputs have one token an image in the last
    layer, the agreement compares that token with PyTorch's dummy token, and the report says so."""
    fp32 = export_tiny(tmp_path / "m.onnx")
    model = tiny_model()
    images = np.random.default_rng(0).standard_normal((16, 3, 36, 36)).astype(np.float32)
    to_int8(fp32, tmp_path / "m-int8.onnx", images, {"manifest_sha256": "test", "n": 16})
    parity = variant_parity(tmp_path / "m-int8.onnx", model, images)
    assert parity["routed_tokens"] == [145, 145, 1] and len(parity["routing_agreement"]) == 3
    assert all(0.0 <= a <= 1.0 for a in parity["routing_agreement"])
    lines = routing_report(parity, "int8").splitlines()
    layer2 = next(line for line in lines if line.strip().startswith("layer 2:"))
    assert "the dummy token alone" in layer2 and "the dummy token alone" not in "".join(lines[1:3])
    # the agreement of a one-token layer is against the reference's last token, not its first
    got, want = np.zeros((2, 1, 2), np.int64), np.ones((2, 145, 2), np.int64)
    want[:, -1] = 0
    assert routing_agreement([got], [want]) == [1.0]
