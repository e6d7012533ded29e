"""The MagpieTTS acoustic model's modules and its per-call pieces (NeMo ``MagpieTTSModel``,
``model_type: decoder_ce`` with a baked speaker context; spec §7.2-7.4).

`MagpieModel` owns every tensor of the checkpoint under NeMo's names: ``text_embedding``,
``encoder``, ``decoder``, ``final_proj``, ``audio_embeddings.{k}`` (k = c + C·i for codebook c
of frame i in the stack), ``local_transformer_in_projection`` (a Linear only when the LT is
narrower than ``d_model``), ``local_transformer``, ``local_transformer_out_projections.{k}``,
``baked_context_embedding`` (N, T·D) and its three buffers. It computes: the text memory, a
speaker's context block, the decoder input embedding of code frames, one decoder pass and the
``final_proj`` logits. The decode loop is in `voxflow.models.magpie.generate`.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from voxflow.models.magpie.config import MagpieConfig
from voxflow.models.magpie.transformer import KVCache, Transformer, TransformerOutput


def lengths_mask(lengths: Tensor, width: int | None = None) -> Tensor:
    """(B,) int lengths → (B, width) bool, True below each length (NeMo
    ``get_mask_from_lengths``; width defaults to the largest length)."""
    width = int(lengths.max()) if width is None else width
    return torch.arange(width, device=lengths.device)[None, :] < lengths[:, None]


class MagpieModel(nn.Module):
    """MagpieTTS weights and forward pieces. Build on ``meta`` and load with
    `voxflow.models.magpie.loader.load_model`; dtype follows the loaded weights."""

    def __init__(self, config: MagpieConfig) -> None:
        super().__init__()
        self.config = config
        d, v_audio = config.d_model, config.tokens_per_codebook
        self.text_embedding = nn.Embedding(config.text_vocab_size, d)
        self.encoder = Transformer(config.encoder)
        self.decoder = Transformer(config.decoder)
        self.final_proj = nn.Linear(d, config.slots * v_audio)
        self.audio_embeddings = nn.ModuleList(nn.Embedding(v_audio, d)
                                              for _ in range(config.slots))
        self.local_transformer_in_projection: nn.Module = (
            nn.Linear(d, config.lt_hidden) if config.lt_hidden != d else nn.Identity())
        self.local_transformer = Transformer(config.local_transformer)
        self.local_transformer_out_projections = nn.ModuleList(
            nn.Linear(config.lt_hidden, v_audio) for _ in range(config.slots))
        self.baked_context_embedding = nn.Embedding(config.baked_speakers,
                                                    config.baked_frames * d)
        self.register_buffer("_baked_embedding_T", torch.tensor(config.baked_frames))
        self.register_buffer("_baked_embedding_D", torch.tensor(d))
        self.register_buffer("baked_context_embedding_len",
                             torch.full((config.baked_speakers,), config.baked_frames))

    @property
    def dtype(self) -> torch.dtype:
        """The float dtype the weights were loaded in."""
        return self.final_proj.weight.dtype

    @property
    def device(self) -> torch.device:
        """The device holding the weights."""
        return self.final_proj.weight.device

    def encode_text(self, text: Tensor, text_lens: Tensor) -> tuple[Tensor, Tensor]:
        """Text memory: text (B, T) int64 token ids (tokens + EOS, no BOS, spec §7.3),
        text_lens (B,) → (memory (B, T, D) with padded rows exactly 0, mask (B, T) bool).
        Raises `ValueError` on an id outside the vocabulary."""
        memory, mask, _ = self.encode_text_layers(text, text_lens)
        return memory, mask

    def encode_text_layers(self, text: Tensor,
                           text_lens: Tensor) -> tuple[Tensor, Tensor, TransformerOutput]:
        """`encode_text` plus the encoder's `TransformerOutput` (per-layer outputs)."""
        if text.numel() and (int(text.min()) < 0 or int(text.max()) >= self.config.text_vocab_size):
            raise ValueError(f"text ids must lie in [0, {self.config.text_vocab_size})")
        mask = lengths_mask(text_lens, text.shape[1])
        out = self.encoder(self.text_embedding(text), mask)
        return out.output, mask, out

    def speaker_context(self, speakers: Tensor) -> tuple[Tensor, Tensor]:
        """Baked context block per row: speakers (B,) int64 → (context (B, T_ctx, D), mask
        (B, T_ctx) bool) (NeMo ``get_baked_context_embeddings_batch``). Raises `ValueError`
        for an index outside [0, N)."""
        n = self.config.baked_speakers
        if speakers.numel() and (int(speakers.min()) < 0 or int(speakers.max()) >= n):
            raise ValueError(f"speaker index {speakers.tolist()} outside [0, {n})")
        flat = self.baked_context_embedding(speakers)
        context = flat.view(speakers.shape[0], self.config.baked_frames, self.config.d_model)
        table = self.baked_context_embedding_len
        assert isinstance(table, Tensor)
        lens = table[speakers]
        return context, lengths_mask(lens, self.config.baked_frames)

    def embed_audio(self, codes: Tensor) -> Tensor:
        """Decoder input for code frames: codes (B, C, T) int64, T a multiple of S →
        (B, T / S, D), each stacked position the mean of its C·S table embeddings, table
        c + C·i for frame i of the stack (NeMo ``embed_audio_tokens``: summed in that order,
        then divided by C·S). Raises `ValueError` on a bad shape or an id outside the tables."""
        c, s = self.config.num_codebooks, self.config.frame_stacking
        if codes.dim() != 3 or codes.shape[1] != c or codes.shape[2] % s:
            raise ValueError(f"codes must be (B, {c}, k·{s}), got {list(codes.shape)}")
        if codes.numel() and (int(codes.min()) < 0
                              or int(codes.max()) >= self.config.tokens_per_codebook):
            raise ValueError(f"code ids must lie in [0, {self.config.tokens_per_codebook})")
        total: Tensor | None = None
        for i in range(s):
            for k in range(c):
                emb = self.audio_embeddings[k + i * c](codes[:, k, i::s])
                total = emb if total is None else total + emb
        assert total is not None
        return total / (c * s)

    def decode(self, inputs: Tensor, mask: Tensor, memory: Tensor, memory_mask: Tensor,
               priors: list[Tensor | None] | None = None,
               cache: KVCache | None = None) -> TransformerOutput:
        """One decoder pass: inputs (B, T, D) ([context; audio] rows, or only the new rows with
        ``cache``), mask (B, T) bool, memory (B, Tm, D) text memory and its mask, per-layer
        priors (B, 1, Tm) → hidden states after ``norm_out`` and cross-attention probabilities."""
        return self.decoder(inputs, mask, memory, memory_mask, priors, cache)

    def logits(self, hidden: Tensor) -> Tensor:
        """``final_proj``: hidden (..., D) → (..., C·S·V) logits; slot k = c + C·i holds
        codebook c of frame i at [k·V, (k+1)·V), V = codebook_size + 8."""
        out: Tensor = self.final_proj(hidden)
        return out
