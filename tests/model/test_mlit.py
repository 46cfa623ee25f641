import numpy as np
import pytest
import torch
import torch.nn.functional as F

from mlit_edge.model.mlit import MLiT, new_model


@pytest.mark.parametrize("size,depth", [("xxs", 9), ("xs", 12), ("s", 15)])
@pytest.mark.parametrize("batch", [1, 3])
def test_forward_shapes_real_sizes(size, depth, batch):
    model = new_model(size, num_classes=10).eval()
    with torch.no_grad():
        logits, aux = model(torch.randn(batch, 3, 36, 36), return_aux=True)
        tokens, _ = model.forward_features(torch.randn(batch, 3, 36, 36))
    assert logits.shape == (batch, 10)
    assert tokens.shape == (batch, 145, model.cfg.dim)  # 144 patches + dummy
    assert len(aux.experts) == depth and aux.experts[0].shape == (batch, 145, 2)
    assert aux.loss.ndim == 0 and torch.isfinite(aux.loss)


def test_every_parameter_gets_a_gradient_in_training():
    model = new_model("xxs", num_classes=10).train()
    x, y = torch.randn(4, 3, 36, 36), torch.randint(0, 10, (4,))
    logits, aux = model(x, return_aux=True)
    (F.cross_entropy(logits, y) + aux.loss).backward()
    no_grad = [n for n, p in model.named_parameters() if p.grad is None or p.grad.abs().sum() == 0]
    assert no_grad == []
    assert any("w_gate" in n for n, _ in model.named_parameters())
    assert any("w_noise" in n for n, _ in model.named_parameters())


def test_eval_is_deterministic_and_training_is_noisy(tiny_cfg):
    model = MLiT(tiny_cfg)
    x = torch.randn(4, 3, 12, 12)
    model.eval()
    with torch.no_grad():
        assert torch.equal(model(x), model(x))
    model.train()
    with torch.no_grad():
        assert not torch.equal(model(x), model(x))  # noisy gating in training


def test_dense_moe_matches_sparse_reference_in_full_model():
    model = new_model("xxs", num_classes=10).eval()
    x = torch.randn(2, 3, 36, 36)
    with torch.no_grad():
        dense, aux_d = model(x, return_aux=True)
        sparse, aux_s = model(x, return_aux=True, sparse=True)
    assert (dense - sparse).abs().max() <= 1e-5
    assert all(torch.equal(a, b) for a, b in zip(aux_d.experts, aux_s.experts))


def test_classification_reads_the_dummy_token(tiny_cfg):
    model = MLiT(tiny_cfg).eval()
    x = torch.randn(2, 3, 12, 12)
    with torch.no_grad():
        tokens, _ = model.forward_features(x)
        torch.testing.assert_close(model(x), model.head(tokens[:, -1]))


def test_dummy_patch_is_zero_before_positions(tiny_cfg):
    """The dummy token equals projecting an all-zero patch: zeros, then its positional embedding."""
    model = MLiT(tiny_cfg)
    x = torch.randn(2, 3, 12, 12)
    with torch.no_grad():
        emb = model.embed(x)
        torch.testing.assert_close(emb[:, -1], model.pos_embed[0, -1].expand(2, -1))
        padded = F.pad(x, (0, 3, 0, 0))  # a zero patch column to the right: project it
        zero_patch = model.patch_embed(padded)[..., 0, -1]
        assert zero_patch.abs().max() == 0
    assert model.patch_embed.bias is None


def test_only_moe_linears_carry_bias():
    model = new_model("xxs")
    biased = {n for n, _ in model.named_parameters() if n.endswith("bias")}
    assert all(n.startswith("head.") or "norm" in n for n in biased)  # LayerNorms and the classifier
    moe_biases = {n for n, _ in model.named_parameters() if ".moe.experts." in n and n[-1] in "bcd"}
    assert len(moe_biases) == 3 * 9  # b (per expert), c, d (shared) in each of 9 layers


def test_drop_path_is_identity_in_eval(tiny_cfg):
    model = MLiT(tiny_cfg.replace(drop_path=0.5)).eval()
    x = torch.randn(2, 3, 12, 12)
    with torch.no_grad():
        assert torch.equal(model(x), model(x))


def test_sincos_position_init_is_mae_s_table_and_the_default_is_unchanged(tiny_cfg):
    """`pos_init="sincos"` starts the learnable positions at MAE's 2-D sin-cos table (row-major patches, the
    dummy token at zero); the default stays timm's N(0, 0.02), with which the shipped model was trained."""
    from mlit_edge.model.mlit import sincos_positions

    table = sincos_positions(8, 3)  # 3x3 grid, 2 frequencies per half
    assert table.shape == (9, 8)
    row1_col2 = 1 * 3 + 2
    omega = torch.tensor([1.0, 0.01])
    expected = torch.cat([torch.sin(2 * omega), torch.cos(2 * omega), torch.sin(1 * omega), torch.cos(1 * omega)])
    torch.testing.assert_close(table[row1_col2], expected)  # the column's half first, as MAE's table

    # MAE's construction, restated in numpy: meshgrid(w, h) in "xy" order, its first grid (the column) first
    dim, grid = 16, 4
    w, h = np.meshgrid(np.arange(grid, dtype=np.float64), np.arange(grid, dtype=np.float64))
    freq = 1.0 / 10000 ** (np.arange(dim // 4) / (dim // 4))

    def one_axis(pos):
        angle = np.outer(pos.reshape(-1), freq)
        return np.concatenate([np.sin(angle), np.cos(angle)], axis=1)

    mae = np.concatenate([one_axis(w), one_axis(h)], axis=1)
    np.testing.assert_allclose(sincos_positions(dim, grid).numpy(), mae, atol=1e-6)
    model = MLiT(tiny_cfg.replace(pos_init="sincos"))
    assert torch.equal(model.pos_embed[0, :-1], sincos_positions(tiny_cfg.dim, tiny_cfg.grid))
    assert torch.equal(model.pos_embed[0, -1], torch.zeros(tiny_cfg.dim)) and model.pos_embed.requires_grad
    assert 0.01 < MLiT(tiny_cfg).pos_embed.std() < 0.03
    with pytest.raises(ValueError, match="pos_init"):
        tiny_cfg.replace(pos_init="learned")
    with pytest.raises(ValueError, match="divisible by 4"):
        tiny_cfg.replace(pos_init="sincos", dim=18, heads=2)
