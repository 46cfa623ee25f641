"""CUDA paths: fp16 autocast with a GradScaler and the GPU-resident dataset. Skipped without a GPU."""
import pytest
import torch

from tests.helpers import TINY, cli

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]


def test_resident_fp16_training_on_cuda(tmp_path):
    proc = cli("train", *TINY, "--epochs", "2", "--batch-size", "256", "--device", "cuda", "--resident",
               "--amp", "fp16", "--no-progress", "--out", tmp_path / "run", timeout=600)
    assert "amp torch.float16" in proc.stderr
    ckpt = torch.load(tmp_path / "run" / "checkpoint.pt", weights_only=True)
    assert ckpt["scaler"] is not None and ckpt["epoch"] == 2
    assert all(torch.isfinite(v).all() for v in ckpt["model"].values() if v.is_floating_point())
