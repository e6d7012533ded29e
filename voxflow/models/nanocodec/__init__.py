"""NanoCodec decoder (nvidia/nemo-nano-codec-22khz-1.89kbps-21.5fps), built from
`../shared/specs/nanocodec-magpietts.md` §1-6: codec tokens → 22,050 Hz audio, one-shot or
streamed with exact causal state held on the model's device.

Modules: `config` (decoder arguments and the per-stream cache inventory), `fsq` (token ids →
latent, ids range-checked), `layers` (weight-normed causal conv and transposed conv, HalfSnake),
`resblocks` (a stage's residual layer), `decoder` (the decoder, one-shot with lengths or one
chunk of a stream), `stream` (stream state, slot pool, `decode` / `decode_chunk`), `step` (one
batched chunk step over pool rows, eager or a captured CUDA graph), `stage` (the engine stage:
codes in, audio out, per-request slots), `loader` (strict loading with weight norm folded
once, checkpoint prefixes, the full-size manifest on ``meta``). Proven against
`tests/fixtures/nanocodec/` (NeMo on tiny random weights). Needs torch and safetensors (the
`nanocodec` extra). Served by the ``magpie`` family (`voxflow.models.magpie.family`). Not yet:
GPU runs of the captured step.
"""
