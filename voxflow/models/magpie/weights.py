"""What the `magpie` family loads (spec §0, §7.6, §8.3): the acoustic model, the codec decoder
and the stand-in text tokenizer. Only random weights exist here, so:

- `tiny_config` / `tiny_random_state_dict`: the tiny MagpieTTS of spec §7.6 (the shape of the
  NeMo fixtures' tiny models: d_model 32, 2 heads, encoder 2 layers k3 causal, decoder 2 layers
  with 1 × 16 cross-attention, LT 1 layer hidden 16, 2 baked speakers × 5 frames, text
  vocabulary 20), its state dict in NeMo's key layout with random values, loaded through the
  strict loader like a checkpoint would be;
- `load_codec`: the NeMo-made tiny NanoCodec decoder of the fixtures, the full-size one with
  random values, or a NanoCodec ``.nemo`` archive;
- `StandInTokenizer`: the Magpie tokenizers are missing (spec §0), so text ids come from a
  stand-in: one id per character, ``ord(ch) % (vocab − 2)``, then the text EOS.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from voxflow.models.files import reading
from voxflow.models.magpie.config import InferenceConfig, MagpieConfig, TransformerConfig
from voxflow.models.magpie.loader import build_model, load_model
from voxflow.models.magpie.model import MagpieModel
from voxflow.models.magpie.settings import (
    TINY_CONTEXT_FRAMES,
    TINY_DECODER_POSITIONS,
    MagpieSettings,
)
from voxflow.models.nanocodec.config import DecoderConfig
from voxflow.models.nanocodec.decoder import NanoCodecDecoder
from voxflow.models.nanocodec.loader import load_decoder, random_state_dict, split_checkpoint
from voxflow.models.nemo_archive import nanocodec_config, read_nemo

NUM_CODEBOOKS = 8  # NanoCodec's FSQ groups (spec §2)
CODEBOOK_SIZE = 2016
TINY_TEXT_VOCAB = 20  # 18 tokens + text BOS + text EOS (the fixtures' stub tokenizer)
TINY_SPEAKERS = 2
TINY_ENCODER_POSITIONS = 2048  # one id per character: segments stay far below it
CODEC_FIXTURES = Path(__file__).resolve().parents[3] / "tests" / "fixtures" / "nanocodec"
TINY_CODEC_FILE = "tiny_decoder_state_dict.safetensors"


def tiny_config(settings: MagpieSettings) -> MagpieConfig:
    """The tiny model's config with the settings' decoding parameters (spec §7.6, §8.3).

    ``max_decoder_steps`` is ``max_frames``; ``topk`` is 1 when ``greedy`` (argmax is used
    then anyway); the prior is estimated from both decoder layers and applied to the last, as
    in the fixtures. Raises `ValueError` from the config's own checks."""
    encoder = TransformerConfig(
        n_layers=2, d_model=32, d_ffn=64, sa_n_heads=2, kernel_size=3, is_causal=True,
        apply_norm_out=True, max_length_causal_mask=TINY_ENCODER_POSITIONS,
        use_learnable_pos_emb=True)
    decoder = TransformerConfig(
        n_layers=2, d_model=32, d_ffn=64, sa_n_heads=2, kernel_size=1, is_causal=True,
        apply_norm_out=True, max_length_causal_mask=TINY_DECODER_POSITIONS,
        use_learnable_pos_emb=True, has_xattn=True, xa_n_heads=1, xa_d_head=16, xa_d_memory=32)
    inference = InferenceConfig(
        max_decoder_steps=settings.max_frames, temperature=settings.temperature,
        topk=1 if settings.greedy else settings.top_k, cfg_scale=settings.cfg_scale,
        apply_attention_prior=settings.attention_prior,
        estimate_alignment_from_layers=(0, 1), apply_prior_to_layers=(1,),
        min_generated_frames=settings.min_frames)
    return MagpieConfig(
        d_model=32, num_codebooks=NUM_CODEBOOKS, codebook_size=CODEBOOK_SIZE,
        frame_stacking=settings.frame_stacking, text_vocab_size=TINY_TEXT_VOCAB,
        baked_speakers=TINY_SPEAKERS, baked_frames=TINY_CONTEXT_FRAMES, encoder=encoder,
        decoder=decoder, lt_layers=1, lt_heads=1, lt_hidden=16, inference=inference)


def tiny_random_state_dict(config: MagpieConfig, seed: int) -> dict[str, torch.Tensor]:
    """Random float32 values for every key of ``config``'s model in NeMo's layout (the
    modules' own initialisation drawn under ``seed``; baked context N(0, 1)), plus the
    buffers. The global RNG is left as it was."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        module = build_model(config, "cpu")
        with torch.no_grad():
            module.baked_context_embedding.weight.normal_()
        return {k: v.detach().clone() for k, v in module.state_dict().items()}


def load_acoustic(settings: MagpieSettings) -> MagpieModel:
    """The acoustic model of ``settings`` on its device (float32, eval). Only `tiny_random`
    exists: built from `tiny_random_state_dict` and loaded strictly (`load_model`), so the key
    layout is checked as a checkpoint's would be. Raises `StateDictError` / `ValueError`."""
    config = tiny_config(settings)
    state = tiny_random_state_dict(config, settings.acoustic_seed)
    return load_model(state, config, device=settings.device)


def load_codec(settings: MagpieSettings) -> NanoCodecDecoder:
    """The NanoCodec decoder of ``settings`` (float32, weight norm folded) on its device.

    A ``.nemo`` path is read with `voxflow.models.nemo_archive.read_nemo`: the decoder's sizes
    from its config's ``audio_decoder`` section, the weights split and checked by
    `nanocodec.loader.split_checkpoint` (``audio_decoder.`` keys, FSQ buffers).

    Raises:
        FileNotFoundError: `tiny_fixture` and no ``tiny_decoder_state_dict.safetensors``.
        StateDictError: the weights do not match the decoder (every key named).
        NemoArchiveError: an unreadable archive or config.
        ValueError, TypeError: decoder settings the decoder does not support.
    """
    device = torch.device(settings.device)
    prepack = device.type == "cpu"
    if isinstance(settings.codec_weights, Path):
        archive = read_nemo(settings.codec_weights)
        config = DecoderConfig.from_dict(nanocodec_config(archive.config))
        state, _ = split_checkpoint(archive.state_dict)
        return load_decoder(state, config, device=device, prepack=prepack)
    if settings.codec_weights == "full_random":
        config = DecoderConfig()
        return load_decoder(random_state_dict(config), config, device=device, prepack=prepack)
    from safetensors.torch import load_file

    path = (settings.codec_fixtures_dir or CODEC_FIXTURES) / TINY_CODEC_FILE
    if not path.is_file():
        raise FileNotFoundError(f"codec_weights tiny_fixture: {path} does not exist")
    with reading(path, "NanoCodec tiny fixture weights"):
        state = load_file(str(path))
    return load_decoder(state, DecoderConfig.tiny(), device=device, prepack=prepack)


class StandInTokenizer:
    """Text → ids for a vocabulary of ``vocab`` ids whose last two are text BOS and EOS.

    The real Magpie tokenizers are not available (spec §0): each character maps to
    ``ord(ch) % (vocab − 2)``, and the text EOS (``vocab − 1``) ends the ids (spec §7.3: no
    BOS). Deterministic, never raises for any text; it carries no meaning, like the weights.
    """

    def __init__(self, vocab: int) -> None:
        if vocab < 3:
            raise ValueError(f"vocab must be >= 3, got {vocab}")
        self.vocab = vocab

    def encode(self, text: str) -> np.ndarray:
        """``text`` (n characters) → int64 [n + 1]: the character ids, then EOS."""
        ids = [ord(ch) % (self.vocab - 2) for ch in text]
        return np.asarray([*ids, self.vocab - 1], np.int64)
