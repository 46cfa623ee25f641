import pytest
import torch

from mlit_edge.deploy import to_deploy
from mlit_edge.model import MLiT, create_model


@pytest.mark.parametrize("size", ["xxs", "xs", "s"])
@pytest.mark.parametrize("batch", [1, 8])
def test_deploy_matches_sparse_reference(size, batch):
    torch.manual_seed(0)
    model = create_model(size, num_classes=10).eval()
    x = torch.randn(batch, 3, 36, 36)
    with torch.no_grad():
        ref, aux = model(x, return_aux=True, sparse=True)
        out, *routes = to_deploy(model, probe=True)(x)
    assert (out - ref).abs().max().item() <= 1e-5
    assert len(routes) == len(aux.experts)
    assert all(torch.equal(r, e) for r, e in zip(routes, aux.experts))


def test_to_deploy_is_pure(tiny_cfg):
    model = MLiT(tiny_cfg).train()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    deployed = to_deploy(model)
    assert model.training and not deployed.training
    assert deployed.blocks[0].attn.q.weight is not model.blocks[0].attn.q.weight
    assert all(torch.equal(v, model.state_dict()[k]) for k, v in before.items())
    with torch.no_grad():
        deployed.blocks[0].attn.q.weight.zero_()
    assert not torch.equal(model.blocks[0].attn.q.weight, deployed.blocks[0].attn.q.weight)


def test_to_deploy_refuses_headless_encoder(tiny_cfg):
    with pytest.raises(TypeError, match="classifier"):
        to_deploy(MLiT(tiny_cfg.replace(num_classes=0)))
