"""MagpieTTS acoustic model (NeMo ``MagpieTTSModel``, ``decoder_ce`` with baked speakers),
built from `../shared/specs/nanocodec-magpietts.md` §7 as corrected by the NeMo fixtures in
`../shared/fixtures/magpietts/`: text → codec frames (8 codebooks) for the NanoCodec decoder.

Modules: `config` (sizes from the checkpoint cfg, validated once), `transformer` (NeMo's
pre-norm transformer with an optional KV cache), `model` (weights under NeMo's names; text
memory, speaker context, audio embedding, decoder pass, ``final_proj``), `prior` (the
inference attention prior), `sampling` (special-token masking, greedy or seeded top-k
sampling, CFG, EOS detection), `local_transformer` (per-step autoregressive codes),
`generate` (the decode loop with its EOS, min-frames and max-frames rules), `loader` (strict
loading; the full-size model on ``meta`` from the manifest). Needs torch.

Served as family ``magpie`` (spec §8): `settings` (its options, torch-free), `weights` (the
tiny random model, the codec, the stand-in tokenizer), `stages` (front end, autoregressive
acoustic stage, the NanoCodec stage with speed), `family` (`MagpieFamily`).
"""
