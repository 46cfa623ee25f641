"""The models: config and sizes, attention, gating, the MoE, mLiT, mmLiT, and their per-layer cost.

One concept per file, leaf layers first: `config` -> `attention`, `gating` -> `moe` -> `mlit` ->
`mae`; `info` counts parameters and MACs. `config` imports without torch (the CLI reads the sizes).
"""
