import pytest

from mlit_edge.model.config import PAPER_PARAMS, SIZES, MAEConfig, MLiTConfig, get_config, size_label
from mlit_edge.model.mlit import count_parameters, new_model

# NOTES.md lists these per-layer hidden sizes; they follow from Eq. 2 of the paper.
EXPECTED_HIDDEN = {
    "xxs": [81, 74, 67, 60, 54, 47, 40, 33, 27],
    "xs": [96, 90, 84, 78, 72, 66, 61, 55, 49, 43, 37, 32],
    "s": [144, 138, 133, 128, 123, 118, 113, 108, 102, 97, 92, 87, 82, 77, 72],
}


@pytest.mark.parametrize("size", ["xxs", "xs", "s"])
def test_hidden_sizes_follow_eq2(size):
    assert get_config(size).hidden_sizes() == EXPECTED_HIDDEN[size]


@pytest.mark.parametrize("size,stage", [("xxs", 3), ("xs", 4), ("s", 5)])
def test_experts_rise_3_to_5_in_equal_stages(size, stage):
    experts = get_config(size).experts_per_layer()
    assert experts == [3] * stage + [4] * stage + [5] * stage


def analytic_params(cfg: MLiTConfig) -> int:
    """Parameter count written out from the paper's description, independently of the modules."""
    D, C = cfg.dim, cfg.head_dim
    total = cfg.patch_size**2 * cfg.in_chans * D + cfg.num_tokens * D  # projection, positions
    for h, t in zip(cfg.hidden_sizes(), cfg.experts_per_layer()):
        total += 2 * D * D + 2 * D * cfg.groups * C  # q, out; k, v (GQA)
        total += (2 * D + 2 * cfg.groups * C) if cfg.attn_bias else 0  # their biases, in the other reading
        total += 2 * 2 * D  # two LayerNorms
        total += 2 * D * t  # Wg, Wnoise
        total += t * (D * h + h) + (D * h + h) + (h * D + D)  # per-expert W, b; shared V, c; W2, d
    return total + 2 * D + D * cfg.num_classes + cfg.num_classes  # final norm, head


@pytest.mark.parametrize("size", ["xxs", "xs", "s"])
def test_parameter_counts_match_analytic_and_paper(size):
    model = new_model(size, num_classes=100)
    n = count_parameters(model)
    assert n == analytic_params(model.cfg)
    tolerance = {"xxs": 0.02, "xs": 0.02, "s": 0.04}[size]  # XXS: paper states 0.67M outright
    assert abs(n - PAPER_PARAMS[size]) / PAPER_PARAMS[size] < tolerance


@pytest.mark.parametrize("size", ["xxs", "xs", "s"])
def test_the_attention_bias_reading_adds_qkv_and_output_biases_and_lands_closer_to_the_paper(size):
    """docs/model.md weighs the two readings of the paper's bias sentence by these counts."""
    plain = new_model(size, num_classes=100)
    biased = new_model(size, num_classes=100, attn_bias=True)
    n, m = count_parameters(plain), count_parameters(biased)
    assert m == analytic_params(biased.cfg) and m - n == plain.cfg.depth * (2 * plain.cfg.dim + 2 * plain.cfg.groups
                                                                           * plain.cfg.head_dim)
    assert abs(m - PAPER_PARAMS[size]) < abs(n - PAPER_PARAMS[size])


def test_xxs_is_within_2_percent_of_067m():
    n = count_parameters(new_model("xxs", num_classes=100))
    assert 0.67e6 * 0.98 <= n <= 0.67e6 * 1.02


def test_get_config_rejects_unknown_size_and_lists_valid_ones():
    with pytest.raises(KeyError, match="s, xs, xxs"):
        get_config("tiny")


def test_get_config_overrides_and_is_frozen():
    cfg = get_config("XXS", num_classes=10, top_k=1)
    assert (cfg.num_classes, cfg.top_k) == (10, 1)
    with pytest.raises(Exception):
        cfg.dim = 3  # frozen
    assert SIZES["xxs"].num_classes == 100  # the registry is untouched


@pytest.mark.parametrize("bad", [dict(groups=4), dict(top_k=4), dict(shared=("x",)), dict(balance="l2"),
                                 dict(depth=10), dict(img_size=35)])
def test_invalid_configs_are_refused(bad):
    with pytest.raises(ValueError, match="invalid MLiTConfig"):
        get_config("xxs", **bad)


def test_mae_config_needs_headless_encoder():
    with pytest.raises(ValueError, match="num_classes=0"):
        MAEConfig(encoder=get_config("xxs"))


def test_size_label_marks_a_changed_model_as_custom():
    assert size_label("XS", get_config("xs", num_classes=10)) == "xs"  # another head is still XS
    assert size_label("xxs", get_config("xxs", num_classes=0)) == "xxs"  # a headless MAE encoder too
    assert size_label("xxs", get_config("xxs", num_classes=10, top_k=1)) == "xxs-custom"
    assert size_label("xxs-custom", get_config("xxs", num_classes=10, top_k=1)) == "xxs-custom"
    assert size_label("xxs-custom", get_config("xxs", num_classes=10)) == "xxs"  # fine-tuned back to the size
    assert size_label("mine", get_config("s")) == "mine"  # not a registered size: left as it is


def test_a_config_is_bounded_by_what_it_implies_before_anything_is_built(monkeypatch):
    """`implied_params` is the built model's count, from arithmetic alone; configs past the ceiling (10^5
    layers, 10^6 experts) are refused in one line, and the environment raises the ceiling."""
    import time

    from mlit_edge.model.budget import implied_params
    from mlit_edge.model.config import MAEConfig, SIZES, get_config
    from mlit_edge.model.mae import MMLiT
    from mlit_edge.model.mlit import MLiT, count_parameters

    for cfg in [*SIZES.values(), SIZES["xs"].replace(num_classes=10, shared=("w",), attn_bias=True, noisy_gating=False)]:
        assert implied_params(cfg) == count_parameters(MLiT(cfg))
    start = time.monotonic()
    for overrides in ({"depth": 99999}, {"expert_stages": (10**6,)}, {"dim": 6 * 10**29}):
        with pytest.raises(ValueError, match="over the ceiling"):
            get_config("xxs", **overrides)
    assert time.monotonic() - start < 30  # arithmetic, not allocation
    with pytest.raises(ValueError, match="over the ceiling"):
        MAEConfig(dec_depth=10**6)
    assert count_parameters(MMLiT(MAEConfig())) > 0
    monkeypatch.setenv("MLIT_EDGE_MAX_PARAMS", "1000")
    with pytest.raises(ValueError, match="MLIT_EDGE_MAX_PARAMS"):
        get_config("xxs", num_classes=10)
