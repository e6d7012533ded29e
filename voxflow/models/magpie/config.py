"""MagpieTTS configuration, read from a checkpoint's NeMo ``cfg`` (spec §7.1: every size comes
from the checkpoint, none is hard-coded) and validated once.

- `TransformerConfig`: one NeMo ``transformer_2501.Transformer`` (encoder, decoder, or the local
  transformer derived from the model-level ``local_transformer_*`` fields).
- `InferenceConfig`: NeMo ``ModelInferenceParameters`` (``magpietts.py``), with its defaults
  (temperature 0.7, top-k 80, CFG 2.5, prior window 5: spec §7.0 items 4-5) and the legacy
  names ``prior_epsilon`` / ``lookahead_window_size`` of the 357m checkpoint.
- `MagpieConfig`: the whole acoustic model. The sizes that NeMo takes from outside its cfg (the
  codec's codebooks, the tokenizer's vocabulary, the baked speaker table) are keyword
  arguments of `MagpieConfig.from_nemo`; `checkpoint_sizes` reads the last two off a state dict.

Every check raises `ValueError` naming the field. Only what this re-implementation runs is
accepted: ``model_type: decoder_ce`` with a baked context, an autoregressive local
transformer, no MoE, no BPE-char tokenizer.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

SPECIAL_TOKENS = 8
"""Ids appended to each codebook: BOS, EOS, context BOS, context EOS, MASK, 3 reserved
(NeMo ``SpecialAudioToken``; spec §7.0 item 7)."""

SINK_ADVANCE_COUNT = 8
"""A text position attended this many times is skipped when looking for the next one
(hard-coded in NeMo ``get_most_attended_text_timestep``; spec §7.5)."""

SINK_RESET_COUNT = 10
"""The prior is set back to ε up to a text position attended this many times (hard-coded in
NeMo ``construct_inference_prior``; spec §7.5)."""

SHORT_TEXT = 5
"""Texts of at most this many tokens get a uniform prior (NeMo ``construct_inference_prior``)."""

TEXT_END_MARGIN = 3
"""The alignment window ends this many positions before the text end (NeMo
``get_most_attended_text_timestep``)."""

MIN_DECODER_STEPS = 4
"""Decoding never stops before this many decoder steps (NeMo ``infer_batch``; spec §7.0 item 6)."""

EOS_METHODS = (
    "argmax_any", "argmax_or_multinomial_any", "argmax_all", "argmax_or_multinomial_all",
    "argmax_zero_cb", "argmax_or_multinomial_zero_cb",
)
"""NeMo ``EOSDetectionMethod`` values (``magpietts_modules.py``)."""

# cfg keys read elsewhere or with no effect at inference (dropout, training-only settings)
_TRANSFORMER_IGNORED = frozenset({"p_dropout", "p_dropout_out", "make_prior_window_strict",
                                  "conv_non_linearity", "use_moe"})


def _need(doc: Mapping[str, Any], key: str, where: str) -> Any:
    if key not in doc:
        raise ValueError(f"{where}: missing field {key!r}")
    return doc[key]


@dataclass(frozen=True)
class TransformerConfig:
    """Arguments of one NeMo ``transformer_2501.Transformer`` that matter at inference.

    ``xa_d_head`` defaults to ``d_model // xa_n_heads`` as in NeMo ``Attention``. Raises
    `ValueError` on a non-positive size, heads that do not divide ``d_model``, or cross-attention
    fields missing while ``has_xattn``.
    """

    n_layers: int
    d_model: int
    d_ffn: int
    sa_n_heads: int
    kernel_size: int
    is_causal: bool = True
    apply_norm_out: bool = False
    max_length_causal_mask: int = 4096
    use_learnable_pos_emb: bool = False
    has_xattn: bool = False
    xa_n_heads: int | None = None
    xa_d_head: int | None = None
    xa_d_memory: int | None = None
    apply_norm_to_cond: bool = True

    def __post_init__(self) -> None:
        for name in ("n_layers", "d_model", "d_ffn", "sa_n_heads", "kernel_size",
                     "max_length_causal_mask"):
            if int(getattr(self, name)) <= 0:
                raise ValueError(f"transformer {name} must be positive, got {getattr(self, name)}")
        if self.d_model % self.sa_n_heads:
            raise ValueError(f"sa_n_heads {self.sa_n_heads} does not divide d_model {self.d_model}")
        if self.has_xattn:
            if self.xa_n_heads is None or self.xa_d_memory is None:
                raise ValueError("has_xattn needs xa_n_heads and xa_d_memory")
            if self.d_model % self.xa_n_heads:
                raise ValueError(f"xa_n_heads {self.xa_n_heads} does not divide d_model")
            if self.xa_d_head is None:
                object.__setattr__(self, "xa_d_head", self.d_model // self.xa_n_heads)

    @property
    def sa_d_head(self) -> int:
        """Self-attention head width, ``d_model // sa_n_heads``."""
        return self.d_model // self.sa_n_heads

    @classmethod
    def from_dict(cls, doc: Mapping[str, Any], where: str) -> TransformerConfig:
        """From a NeMo cfg section (``encoder`` / ``decoder``). Raises `ValueError` on an unknown
        key, a missing required key, or ``use_moe: true`` (MoE is not implemented)."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(doc) - known - _TRANSFORMER_IGNORED)
        if unknown:
            raise ValueError(f"{where}: unknown transformer field(s) {unknown}")
        if doc.get("use_moe", False):
            raise ValueError(f"{where}: use_moe is not supported")
        for key in ("n_layers", "d_model", "d_ffn", "sa_n_heads", "kernel_size"):
            _need(doc, key, where)
        return cls(**{k: v for k, v in doc.items() if k in known})


@dataclass(frozen=True)
class InferenceConfig:
    """NeMo ``ModelInferenceParameters`` (defaults as at NeMo ``a80c059``).

    ``max_decoder_steps`` counts codec frames: the loop runs ``max_decoder_steps // S`` steps
    (spec §7.0 item 6). ``use_LT_kv_cache`` is accepted and has no effect on the codes (the
    local transformer here always caches). ``ignore_finished_sentence_tracking: false`` is
    rejected (NeMo's default is true; the fixtures run it).
    """

    max_decoder_steps: int = 500
    temperature: float = 0.7
    topk: int = 80
    cfg_scale: float = 2.5
    apply_attention_prior: bool = True
    attention_prior_epsilon: float = 0.1
    attention_prior_lookahead_window: int = 5
    estimate_alignment_from_layers: tuple[int, ...] | None = None
    apply_prior_to_layers: tuple[int, ...] | None = None
    start_prior_after_n_audio_steps: int = 0
    use_LT_kv_cache: bool = True
    ignore_finished_sentence_tracking: bool = True
    eos_detection_method: str = "argmax_or_multinomial_any"
    min_generated_frames: int = 4

    def __post_init__(self) -> None:
        if self.max_decoder_steps < 1:
            raise ValueError(f"max_decoder_steps must be >= 1, got {self.max_decoder_steps}")
        if self.topk < 1:
            raise ValueError(f"topk must be >= 1, got {self.topk}")
        if self.temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {self.temperature}")
        if self.min_generated_frames < 0:
            raise ValueError("min_generated_frames must be >= 0")
        if self.attention_prior_lookahead_window < 1:
            raise ValueError("attention_prior_lookahead_window must be >= 1")
        if self.eos_detection_method not in EOS_METHODS:
            raise ValueError(f"eos_detection_method {self.eos_detection_method!r} not in "
                             f"{list(EOS_METHODS)}")
        if not self.ignore_finished_sentence_tracking:
            raise ValueError("ignore_finished_sentence_tracking=false is not supported")
        for name in ("estimate_alignment_from_layers", "apply_prior_to_layers"):
            value = getattr(self, name)
            if value is not None:
                object.__setattr__(self, name, tuple(int(v) for v in value))

    @classmethod
    def from_dict(cls, doc: Mapping[str, Any]) -> InferenceConfig:
        """From a cfg's ``inference_parameters``: unknown keys are ignored as NeMo's
        ``from_dict`` does; ``prior_epsilon`` / ``lookahead_window_size`` override the new names."""
        known = {f.name for f in fields(cls)}
        values = {k: v for k, v in doc.items() if k in known}
        if "prior_epsilon" in doc:
            values["attention_prior_epsilon"] = doc["prior_epsilon"]
        if "lookahead_window_size" in doc:
            values["attention_prior_lookahead_window"] = doc["lookahead_window_size"]
        return cls(**values)

    def check_layers(self, n_layers: int) -> None:
        """Raise `ValueError` if a prior / alignment layer index is outside the decoder."""
        for name in ("estimate_alignment_from_layers", "apply_prior_to_layers"):
            bad = [i for i in getattr(self, name) or () if not 0 <= i < n_layers]
            if bad:
                raise ValueError(f"{name} {bad} outside the decoder's {n_layers} layers")


@dataclass(frozen=True)
class MagpieConfig:
    """The MagpieTTS acoustic model (NeMo ``MagpieTTSModel``, ``model_type: decoder_ce``).

    Sizes: ``d_model`` = cfg ``embedding_dim``; C = ``num_codebooks`` codebooks of
    ``codebook_size`` codes plus `SPECIAL_TOKENS` specials each; S = ``frame_stacking`` codec
    frames per decoder step; ``text_vocab_size`` includes the text BOS / EOS NeMo appends
    (``vocab − 2`` / ``vocab − 1``); ``baked_speakers`` × ``baked_frames`` × ``d_model`` baked
    context. Raises `ValueError` on any inconsistency (widths that differ, a decoder without
    cross-attention, a context longer than the decoder's positions, ...).
    """

    d_model: int
    num_codebooks: int
    codebook_size: int
    frame_stacking: int
    text_vocab_size: int
    baked_speakers: int
    baked_frames: int
    encoder: TransformerConfig
    decoder: TransformerConfig
    lt_layers: int
    lt_heads: int
    lt_hidden: int
    inference: InferenceConfig = field(default_factory=InferenceConfig)

    def __post_init__(self) -> None:
        for name in ("d_model", "num_codebooks", "codebook_size", "frame_stacking",
                     "baked_speakers", "baked_frames", "lt_layers", "lt_heads", "lt_hidden"):
            if int(getattr(self, name)) <= 0:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")
        if self.text_vocab_size < 3:
            raise ValueError(f"text_vocab_size must be >= 3, got {self.text_vocab_size}")
        if self.encoder.d_model != self.d_model or self.decoder.d_model != self.d_model:
            raise ValueError(f"encoder / decoder d_model {self.encoder.d_model} / "
                             f"{self.decoder.d_model} differ from embedding_dim {self.d_model}")
        if self.encoder.has_xattn:
            raise ValueError("the text encoder must not have cross-attention")
        if not self.decoder.has_xattn or self.decoder.xa_d_memory != self.d_model:
            raise ValueError("the decoder needs cross-attention over d_model-wide text memory")
        if not self.decoder.is_causal:
            raise ValueError("the decoder must be causal")
        if self.baked_frames >= self.decoder.max_length_causal_mask:
            raise ValueError(f"baked context of {self.baked_frames} frames leaves no decoder "
                             f"positions (max {self.decoder.max_length_causal_mask})")
        if self.lt_hidden % self.lt_heads:
            raise ValueError(f"local_transformer_n_heads {self.lt_heads} does not divide "
                             f"local_transformer_hidden_dim {self.lt_hidden}")
        self.inference.check_layers(self.decoder.n_layers)

    # ---- derived ids and sizes (NeMo derives every special id as codebook_size + k) ----
    @property
    def tokens_per_codebook(self) -> int:
        """V: rows of each audio table and logits per slot, codebook_size + 8."""
        return self.codebook_size + SPECIAL_TOKENS

    @property
    def audio_bos(self) -> int:
        """Audio BOS id, codebook_size + 0 (2016 full size)."""
        return self.codebook_size

    @property
    def audio_eos(self) -> int:
        """Audio EOS id, codebook_size + 1 (2017 full size)."""
        return self.codebook_size + 1

    @property
    def text_bos(self) -> int:
        """Text BOS id, vocab − 2 (NeMo appends it; unused at inference)."""
        return self.text_vocab_size - 2

    @property
    def text_eos(self) -> int:
        """Text EOS id, vocab − 1: ends every text input (spec §7.3)."""
        return self.text_vocab_size - 1

    @property
    def slots(self) -> int:
        """C·S: codebook slots per decoder step (audio tables, LT heads, logit slices)."""
        return self.num_codebooks * self.frame_stacking

    @property
    def local_transformer(self) -> TransformerConfig:
        """The LT as NeMo builds it: d_ffn 4·hidden, kernel 1, causal, learned positions, no
        ``norm_out``, C·S + 2 positions (spec §7.0 items 2-3)."""
        return TransformerConfig(
            n_layers=self.lt_layers, d_model=self.lt_hidden, d_ffn=4 * self.lt_hidden,
            sa_n_heads=self.lt_heads, kernel_size=1, is_causal=True, apply_norm_out=False,
            max_length_causal_mask=self.slots + 2, use_learnable_pos_emb=True)

    @classmethod
    def from_nemo(
        cls,
        cfg: Mapping[str, Any],
        *,
        num_codebooks: int,
        codebook_size: int,
        text_vocab_size: int,
        baked_speakers: int,
        baked_frames: int,
    ) -> MagpieConfig:
        """From a checkpoint's model cfg (``model_config.yaml``, or a fixture header's ``cfg``).

        ``num_codebooks`` / ``codebook_size`` come from the codec, ``text_vocab_size`` from the
        tokenizer (its tokens + 2), the baked sizes from the checkpoint (`checkpoint_sizes`).
        Raises `ValueError` on an unsupported model type, local transformer type, tokenizer or
        a missing field.
        """
        where = "MagpieTTS cfg"
        if cfg.get("model_type") != "decoder_ce":
            raise ValueError(f"{where}: model_type {cfg.get('model_type')!r} is not decoder_ce")
        if cfg.get("use_text_conditioning_encoder", False):
            raise ValueError(f"{where}: use_text_conditioning_encoder is not supported "
                             "(baked context only)")
        if cfg.get("use_bpe_char_tokenizer", False):
            raise ValueError(f"{where}: use_bpe_char_tokenizer is not supported")
        lt_type = str(cfg.get("local_transformer_type", "none")).lower()
        if lt_type != "autoregressive":
            raise ValueError(f"{where}: local_transformer_type {lt_type!r} is not autoregressive")
        return cls(
            d_model=int(_need(cfg, "embedding_dim", where)),
            num_codebooks=num_codebooks,
            codebook_size=codebook_size,
            frame_stacking=int(cfg.get("frame_stacking_factor", 1)),
            text_vocab_size=text_vocab_size,
            baked_speakers=baked_speakers,
            baked_frames=baked_frames,
            encoder=TransformerConfig.from_dict(_need(cfg, "encoder", where), "encoder"),
            decoder=TransformerConfig.from_dict(_need(cfg, "decoder", where), "decoder"),
            # NeMo defaults: 2 layers, 1 head, hidden 256 (MagpieTTSModel.__init__)
            lt_layers=int(cfg.get("local_transformer_n_layers", 2)),
            lt_heads=int(cfg.get("local_transformer_n_heads", 1)),
            lt_hidden=int(cfg.get("local_transformer_hidden_dim", 256)),
            inference=InferenceConfig.from_dict(cfg.get("inference_parameters", {}) or {}),
        )


def checkpoint_sizes(state_dict: Mapping[str, Any]) -> dict[str, int]:
    """``text_vocab_size``, ``baked_speakers`` and ``baked_frames`` read off a state dict:
    ``text_embedding.weight`` rows, ``baked_context_embedding.weight`` rows and the 0-d
    ``_baked_embedding_T`` buffer (spec §7.0 item 1). Raises `ValueError` naming a missing key."""
    for key in ("text_embedding.weight", "baked_context_embedding.weight", "_baked_embedding_T"):
        if key not in state_dict:
            raise ValueError(f"checkpoint lacks {key!r}: cannot size the model")
    return {
        "text_vocab_size": int(state_dict["text_embedding.weight"].shape[0]),
        "baked_speakers": int(state_dict["baked_context_embedding.weight"].shape[0]),
        "baked_frames": int(state_dict["_baked_embedding_T"]),
    }
