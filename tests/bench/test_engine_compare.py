"""bench/engine_compare.py without a GPU: which engine pairs are built (a missing pad_to option or DLA is
a skipped line, not a guess), what the inspector's JSON says of fused attention, and the one table."""
import json

from mlit_edge.bench.engine_compare import export_parameters, format_table, layer_summary, variants


def test_pairs_follow_the_export_options_the_head_size_and_the_dla_cores():
    todo, skipped = variants({"prune_last"}, 0, 18)
    assert [(v.pair, v.export) for v in todo] == [("last layer", {"prune_last": False}),
                                                  ("last layer", {"prune_last": True})]
    assert len(skipped) == 2 and "no pad_to option" in skipped[0] and "no DLA core" in skipped[1]
    todo, skipped = variants({"prune_last", "pad_to"}, 2, 18)
    assert not skipped and [v.dla_core for v in todo if v.pair == "device"] == [None, 0]
    assert [v.export for v in todo if v.pair == "heads"] == [{}, {"pad_to": 24}]
    todo, skipped = variants({"prune_last", "pad_to"}, 2, 32)
    assert "head size 32 takes the fused kernel unpadded" in skipped[0]
    # this build's export_onnx takes the options the pairs pass (it once looked for a pad_heads it never had)
    assert {"prune_last", "pad_to"} <= export_parameters()


def test_fused_attention_is_read_from_the_inspector_layers():
    info = json.dumps({"Layers": [{"Name": "/blocks.0/MatMul", "LayerType": "gemm"},
                                  {"Name": "_gemm_mha_v2_myl0_3", "LayerType": "kgen"},
                                  {"Name": "n", "LayerType": "CaskFlashAttention", "TacticName": "fmha_v2_sm87"}]})
    assert layer_summary(info) == {"layers": 3, "fused_attention": 2, "fused_names": ["_gemm_mha_v2_myl0_3", "n"]}
    assert layer_summary(json.dumps({"Layers": ["a", "b"]}))["fused_attention"] == 0


def test_one_table_with_skipped_lines():
    rows = [{"pair": "last layer", "name": "every token", "p50": {1: 0.5, 64: 2.0},
             "summary": {"layers": 40, "fused_attention": 3}, "dla": None},
            {"pair": "device", "name": "DLA core 0", "p50": {1: 1.25},
             "summary": {"layers": 30, "fused_attention": 0}, "dla": {"dla_layers": 20, "gpu_fallback_layers": 10}}]
    lines = format_table(rows, ["heads: skipped"]).splitlines()
    assert lines[2] == "| last layer | every token | 0.500 | 2.000 | 40 | 3 | - |"
    assert lines[3] == "| device | DLA core 0 | 1.250 | - | 30 | 0 | 20/10 |" and lines[-1] == "- heads: skipped"
