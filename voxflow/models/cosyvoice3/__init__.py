"""CosyVoice3 (Fun-CosyVoice3-0.5B-2512) in PyTorch, built from `../shared/specs/cosyvoice3.md`.

Work in progress (issue 10): modules are added one by one, each proven against the reference
fixtures in `tests/fixtures/cosyvoice3/` (tiny random weights; a copy of the shared fixtures).
Nothing here serves speech yet, and nothing made from random weights is speech.

Modules (spec section): `loader` (strict state-dict loading, checkpoints, full-size manifest on
`meta`, §1, §3), `noise` (fixed random buffers, §8), `features` (prompt features, §4), `lm` and
`sampling` (Qwen2 LM, RAS, silent filter, §5), `dit` and `flow` (conditioning, DiT, Euler + CFG,
§6), `hift`, `f0`, `source`, `wnconv` (vocoder, §7), `token2wav` (the per-segment streaming
loop, §9.7). Not yet: the voxflow family and its stages (§9), graph capture (§10).
Needs the `cosyvoice3` extra (torch, safetensors).
"""
