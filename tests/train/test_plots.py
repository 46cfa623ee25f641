"""The run's figures: MAE's reconstruction figure that pretrain writes."""
import torch

from mlit_edge.model.config import MAEConfig
from mlit_edge.model.mae import MMLiT
from mlit_edge.train.plots import plot_reconstruction
from tests.helpers import synthetic_set


def test_reconstruction_figure_leaves_the_run_s_random_stream_and_mode_alone(tmp_path, tiny_cfg):
    """Drawn at every eval of a pre-training run, it must not shift the run's RNG (a resume replays it
    bit for bit) nor leave the model in eval mode; the same weights draw the same figure."""
    cfg = tiny_cfg.replace(img_size=36, num_classes=0)
    mae = MMLiT(MAEConfig(encoder=cfg, dec_dim=16, dec_heads=4, dec_groups=2, dec_hidden=8, norm_pix_loss=True))
    mae.train()
    state = torch.get_rng_state()
    first = plot_reconstruction(mae, synthetic_set(12), tmp_path / "a.png", n=5).read_bytes()
    assert torch.equal(torch.get_rng_state(), state) and mae.training
    assert first[:8] == b"\x89PNG\r\n\x1a\n"
    assert plot_reconstruction(mae, synthetic_set(12), tmp_path / "b.png", n=5).read_bytes() == first
