"""CosyVoice3 (Fun-CosyVoice3-0.5B-2512) in PyTorch, built from `../shared/specs/cosyvoice3.md`.

Each model module is proven against the reference fixtures in `tests/fixtures/cosyvoice3/` (tiny
random weights). Only random weights exist here: what the family serves with them is noise, and
is labelled so (spec §9.4).

Modules (spec section): `loader` (strict state-dict loading, checkpoints, full-size manifest on
`meta`, §1, §3), `noise` (fixed random buffers, §8), `features` (prompt features, §4), `lm` and
`sampling` (Qwen2 LM, RAS, silent filter, §5), `dit` and `flow` (conditioning, DiT, Euler + CFG,
§6), `hift`, `f0`, `source`, `wnconv` (vocoder, §7), `token2wav` (the per-segment streaming
loop, §9.7), `lm_batch` (one decode step over several segments), `weights` (the three models for
a `weights` setting), `flow_bucket` (the flow solve batched per frame bucket and captured per
(rows, bucket) on CUDA, §10), `instruct` (instruct mode), `bistream`, `lm_bistream`, `lm_stream`
and `text_stream` (one generation across streamed text), `stages` (frontend, lm, token2wav) and
`model` (the voxflow family, §9). See README.md beside this file.
Needs the `cosyvoice3` extra (torch, safetensors).
"""
