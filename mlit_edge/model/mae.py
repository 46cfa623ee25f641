"""mmLiT: masked auto-encoder pre-training around the mLiT encoder, and fine-tuning from it.

Letters: B batch, N tokens, L patches (144), V visible patches, D encoder width, E decoder width,
P pixels per patch (3*3*3), C channels, S image side, G patches per side, p patch side.
"""
from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor, nn

from .config import MAEConfig, MLiTConfig
from .gating import Routing
from .mlit import Block, MLiT, moe_options


def patchify(imgs: Tensor, p: int) -> Tensor:
    """(B, C, S, S) -> (B, L, p*p*C), patches in row-major order like the patch embedding."""
    B, C, S, _ = imgs.shape
    g = S // p
    x = imgs.reshape(B, C, g, p, g, p)  # (B, C, G, p, G, p)
    return torch.einsum("bchpwq->bhwpqc", x).reshape(B, g * g, p * p * C)  # (B, L, P)


def unpatchify(x: Tensor, p: int, channels: int = 3) -> Tensor:
    """(B, L, p*p*C) -> (B, C, S, S), the inverse of `patchify`."""
    B, L, _ = x.shape
    g = int(round(L**0.5))
    x = x.reshape(B, g, g, p, p, channels)  # (B, G, G, p, p, C)
    return torch.einsum("bhwpqc->bchpwq", x).reshape(B, channels, g * p, g * p)


class MAEOutput(NamedTuple):
    loss: Tensor  # () Eq. 3: MSE_masked + alpha * MSE_unmasked + beta * L_MoE
    pred: Tensor  # (B, L, P) predicted pixels of every patch
    mask: Tensor  # (B, L) 1 where the patch was hidden from the encoder
    mse_masked: Tensor
    mse_unmasked: Tensor
    moe_loss: Tensor  # () balancing loss of encoder and decoder MoE layers
    experts: list[Tensor]  # per MoE layer (encoder, then decoder), the (B, tokens, K) chosen experts
    routings: list[Routing]  # per MoE layer, the gate's whole decision and its health


class MMLiT(nn.Module):
    """Masked auto-encoder whose encoder is an mLiT (without head) and whose decoder is MoE too."""

    def __init__(self, cfg: MAEConfig) -> None:
        super().__init__()
        self.cfg = cfg
        enc = cfg.encoder
        self.encoder = MLiT(enc)
        self.mask_token = nn.Parameter(torch.zeros(1, 1, enc.dim))
        nn.init.normal_(self.mask_token, std=0.02)  # [ours] as MAE
        # [paper] no bias on linear projections outside MoE layers, in the decoder too.
        self.decoder_embed = nn.Linear(enc.dim, cfg.dec_dim, bias=False)
        moe_kwargs = moe_options(enc)
        self.decoder_blocks = nn.ModuleList(
            Block(cfg.dec_dim, cfg.dec_heads, cfg.dec_groups, cfg.dec_hidden, cfg.dec_experts, enc.top_k,
                  enc.shared, attn_bias=enc.attn_bias, **moe_kwargs) for _ in range(cfg.dec_depth))
        self.decoder_norm = nn.LayerNorm(cfg.dec_dim)
        self.decoder_pred = nn.Linear(cfg.dec_dim, enc.patch_size**2 * enc.in_chans, bias=False)

    def random_masking(self, x: Tensor, ratio: float) -> tuple[Tensor, Tensor, Tensor]:
        """Keep a random (1 - ratio) of the patch tokens x (B, L, D).

        Returns the visible tokens (B, V, D), the mask (B, L) with 1 = hidden, and the
        permutation that puts the tokens back in order (B, L).
        """
        B, L, D = x.shape
        keep = int(L * (1 - ratio))
        ids_shuffle = torch.rand(B, L, device=x.device).argsort(dim=1)  # (B, L)
        ids_restore = ids_shuffle.argsort(dim=1)  # (B, L)
        visible = x.gather(1, ids_shuffle[:, :keep, None].expand(-1, -1, D))  # (B, V, D)
        mask = torch.ones(B, L, device=x.device)
        mask[:, :keep] = 0
        return visible, mask.gather(1, ids_restore), ids_restore

    @staticmethod
    def _run_blocks(blocks: nn.ModuleList, x: Tensor, routings: list[Routing]) -> tuple[Tensor, Tensor]:
        """x through `blocks`; appends each layer's routing, returns x and the layers' balancing loss."""
        moe_loss = x.new_zeros(())
        for blk in blocks:
            x, routing = blk(x)
            moe_loss = moe_loss + routing.loss
            routings.append(routing)
        return x, moe_loss

    def forward_encoder(self, imgs: Tensor, ratio: float, routings: list[Routing] | None = None):
        """Encode the visible patches plus the dummy token, which is never masked [ours].

        Returns the latent (B, V+1, D), the mask, the restoring permutation and the balancing loss;
        appends each layer's routing to `routings` when given.
        """
        x = self.encoder.embed(imgs)  # (B, N, D), dummy last
        visible, mask, ids_restore = self.random_masking(x[:, :-1], ratio)
        x = torch.cat([visible, x[:, -1:]], dim=1)  # (B, V+1, D)
        x, moe_loss = self._run_blocks(self.encoder.blocks, x, [] if routings is None else routings)
        return self.encoder.norm(x), mask, ids_restore, moe_loss

    def forward_decoder(self, latent: Tensor, mask: Tensor, ids_restore: Tensor,
                        routings: list[Routing] | None = None) -> tuple[Tensor, Tensor]:
        """latent (B, V+1, D) -> predicted pixels (B, L, P) and the decoder's balancing loss.

        [paper] the decoder has no positional embeddings of its own: [recon] a hidden patch enters as
        the learnable mask vector plus the encoder's positional embedding for its place; visible
        tokens already carry theirs from the encoder input.
        """
        B, L = mask.shape
        D = latent.shape[-1]
        visible, dummy = latent[:, :-1], latent[:, -1:]
        fill = self.mask_token.expand(B, L - visible.shape[1], D)  # (B, L-V, D)
        x = torch.cat([visible, fill], dim=1).gather(1, ids_restore[..., None].expand(-1, -1, D))  # (B, L, D)
        x = x + mask[..., None] * self.encoder.pos_embed[:, :L]  # (B, L, D)
        x = self.decoder_embed(torch.cat([x, dummy], dim=1))  # (B, N, E)
        x, moe_loss = self._run_blocks(self.decoder_blocks, x, [] if routings is None else routings)
        return self.decoder_pred(self.decoder_norm(x))[:, :-1], moe_loss  # (B, L, P), dummy dropped

    def forward_loss(self, imgs: Tensor, pred: Tensor, mask: Tensor) -> tuple[Tensor, Tensor]:
        """Mean squared pixel error over the hidden patches and over the visible ones."""
        target = patchify(imgs, self.cfg.encoder.patch_size)  # (B, L, P)
        if self.cfg.norm_pix_loss:
            mean, var = target.mean(-1, keepdim=True), target.var(-1, keepdim=True)
            target = (target - mean) / (var + 1e-6).sqrt()
        per_patch = (pred - target).pow(2).mean(-1)  # (B, L)
        shown = 1 - mask
        masked = (per_patch * mask).sum() / mask.sum().clamp_min(1)
        unmasked = (per_patch * shown).sum() / shown.sum().clamp_min(1)
        return masked, unmasked

    def forward(self, imgs: Tensor, mask_ratio: float | None = None) -> MAEOutput:
        ratio = self.cfg.mask_ratio if mask_ratio is None else mask_ratio
        routings: list[Routing] = []
        latent, mask, ids_restore, enc_loss = self.forward_encoder(imgs, ratio, routings)
        pred, dec_loss = self.forward_decoder(latent, mask, ids_restore, routings)
        masked, unmasked = self.forward_loss(imgs, pred, mask)
        moe_loss = enc_loss + dec_loss
        loss = masked + self.cfg.alpha * unmasked + self.cfg.beta * moe_loss
        B = imgs.shape[0]
        experts = [r.top_i.view(B, -1, r.top_i.shape[-1]) for r in routings]  # (B, tokens, K) per layer
        return MAEOutput(loss, pred, mask, masked, unmasked, moe_loss, experts, routings)


def encoder_state_dict(mae_state: dict[str, Tensor]) -> dict[str, Tensor]:
    """The mLiT encoder's weights out of an mmLiT state dict (the decoder and mask token dropped)."""
    prefix = "encoder."
    return {k[len(prefix):]: v for k, v in mae_state.items() if k.startswith(prefix)}


def classifier_from_mae(mae_state: dict[str, Tensor], encoder_cfg: MLiTConfig, num_classes: int,
                        **overrides) -> MLiT:
    """An mLiT classifier whose encoder comes from an mmLiT state dict; only the head is new.

    Raises ValueError when the state dict does not hold exactly this encoder.
    """
    model = MLiT(encoder_cfg.replace(num_classes=num_classes, **overrides))
    try:
        missing, unexpected = model.load_state_dict(encoder_state_dict(mae_state), strict=False)
    except RuntimeError as e:  # shape mismatches raise even when not strict
        raise ValueError(f"mmLiT weights do not fit this encoder: {str(e).splitlines()[-1].strip()}") from None
    missing = [k for k in missing if not k.startswith("head.")]
    if missing or unexpected:
        raise ValueError(f"mmLiT weights do not fit this encoder: missing {missing[:5]}, unexpected {unexpected[:5]}")
    return model
