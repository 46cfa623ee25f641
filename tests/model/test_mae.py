import pytest
import torch

from mlit_edge.model.config import MAEConfig, get_config
from mlit_edge.model.mae import MMLiT, classifier_from_mae, encoder_state_dict, patchify, unpatchify


def tiny_mae(tiny_cfg) -> MMLiT:
    return MMLiT(MAEConfig(encoder=tiny_cfg.replace(num_classes=0), dec_dim=16, dec_heads=4, dec_groups=2,
                           dec_hidden=8))


def test_patchify_roundtrip_and_order():
    imgs = torch.randn(2, 3, 36, 36)
    patches = patchify(imgs, 3)
    assert patches.shape == (2, 144, 27)
    assert torch.equal(unpatchify(patches, 3), imgs)
    # patch 13 is row 1, column 1: pixels [3:6, 3:6], channel last
    assert torch.equal(patches[0, 13], imgs[0, :, 3:6, 3:6].permute(1, 2, 0).reshape(-1))


def test_masking_hides_75_percent_and_never_the_dummy():
    mae = MMLiT(MAEConfig())
    imgs = torch.randn(4, 3, 36, 36)
    latent, mask, ids_restore, _ = mae.forward_encoder(imgs, 0.75)
    assert latent.shape == (4, 36 + 1, 108)  # 36 visible patches + the dummy token
    assert mask.shape == (4, 144) and (mask.sum(1) == 108).all()
    assert torch.equal(ids_restore.sort(1).values, torch.arange(144).expand(4, -1))


def test_loss_is_eq3(tiny_cfg):
    mae = tiny_mae(tiny_cfg)
    out = mae(torch.randn(2, 3, 12, 12))
    expected = out.mse_masked + 0.1 * out.mse_unmasked + 0.5 * out.moe_loss
    torch.testing.assert_close(out.loss, expected)
    assert out.pred.shape == (2, 16, 27) and out.moe_loss > 0


def test_decoder_has_no_positional_embedding_of_its_own():
    mae = MMLiT(MAEConfig())
    names = [n for n, _ in mae.named_parameters()]
    assert [n for n in names if "pos" in n] == ["encoder.pos_embed"]
    assert len(mae.decoder_blocks) == 2 and mae.decoder_pred.out_features == 27


def test_every_mae_parameter_gets_a_gradient():
    mae = MMLiT(MAEConfig()).train()
    mae(torch.randn(4, 3, 36, 36)).loss.backward()
    assert [n for n, p in mae.named_parameters() if p.grad is None or p.grad.abs().sum() == 0] == []


def test_mae_loss_falls_on_a_tiny_batch():
    torch.manual_seed(0)
    mae = MMLiT(MAEConfig()).train()
    yy, xx = torch.meshgrid(torch.linspace(-1, 1, 36), torch.linspace(-1, 1, 36), indexing="ij")
    imgs = torch.stack([torch.stack([torch.sin(3 * xx + i), torch.cos(2 * yy - i), xx * yy]) for i in range(8)])
    opt = torch.optim.AdamW(mae.parameters(), lr=1e-3)
    losses = []
    for _ in range(25):
        out = mae(imgs)
        opt.zero_grad()
        out.loss.backward()
        opt.step()
        losses.append(out.loss.item())
    assert sum(losses[-5:]) / 5 < 0.75 * sum(losses[:5]) / 5
    assert losses[-1] < 0.5 * losses[0]


def test_mmlit_checkpoint_encoder_loads_into_classifier(tmp_path):
    mae = MMLiT(MAEConfig())
    path = tmp_path / "mmlit.pt"
    torch.save({"model": mae.state_dict()}, path)
    state = torch.load(path, weights_only=True)["model"]
    clf = classifier_from_mae(state, mae.cfg.encoder, num_classes=10)
    missing, unexpected = clf.load_state_dict(encoder_state_dict(state), strict=False)
    assert unexpected == [] and sorted(missing) == ["head.bias", "head.weight"]  # only the new head
    enc_state = encoder_state_dict(state)
    assert all(torch.equal(v, enc_state[k]) for k, v in clf.state_dict().items() if not k.startswith("head."))
    assert clf(torch.randn(1, 3, 36, 36)).shape == (1, 10)


def test_foreign_encoder_is_refused():
    state = MMLiT(MAEConfig()).state_dict()
    with pytest.raises(ValueError, match="do not fit"):
        classifier_from_mae(state, get_config("xs", num_classes=0), num_classes=10)
