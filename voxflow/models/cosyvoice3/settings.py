"""Settings of the CosyVoice3 family (the `options` of a `family: cosyvoice3` model; spec §9.3,
§10), listed in docs/configuration.md.

Kept free of torch: the sampling and hop defaults repeat `sampling.py` and `token2wav.py` (a test
checks they agree).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from voxflow.models import shared_settings as shared
from voxflow.models.shared_settings import check_first_segment

WeightsKind = Literal["tiny_fixture", "full_random"]
CHECKPOINT_FILES = ("llm.pt", "flow.pt", "hift.pt")  # = loader.CHECKPOINT_FILES
# DiT `static_chunk_size` in mel frames (spec §2): tiny 10, full size (random or real) 50
TINY_STATIC_CHUNK_SIZE = 10
FULL_STATIC_CHUNK_SIZE = 50
TOKEN_MEL_RATIO = 2
# token_max_hop_len defaults (spec §2, §9.3): 4 hops (25 -> 100 full size, 5 -> 20 tiny)
MAX_HOP_MULTIPLE = 4
NOISE_FRAMES = 15_000  # the fixed flow noise (spec §8): no capture bucket may pass it
# The prior implementation's ladder (spec §10): 20 buckets of whole 50-frame chunks
DEFAULT_FRAME_BUCKETS = (100, 150, 200, 250, 300, 400, 500, 600, 700, 800, 900, 1000, 1200, 1400,
                         1700, 2000, 2500, 3000, 3600, 4200)
DEFAULT_BATCH_SIZES = (1, 2, 3, 4, 6, 8)
_DEVICE = re.compile(r"cpu|cuda(:\d+)?")


class CosyVoice3Settings(BaseModel):
    """Weights, voices, streaming hops, LM sampling and flow batching / graph capture.

    Without real weights everything served is noise and is labelled so: voice ids start with
    `random-` and `/v1/models` says the weights are random.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    weights: WeightsKind | Path = Field(
        "tiny_fixture",
        description='`"tiny_fixture"`: the tiny random-weight test models from `fixtures_dir` '
        '(CPU); `"full_random"`: full-size models with random weights (GPU timing only); or a '
        "checkpoint directory holding `llm.pt`, `flow.pt` and `hift.pt`. Random weights give "
        "noise, labelled as such.",
    )
    fixtures_dir: Path | None = Field(
        None,
        description="Folder of the CosyVoice3 parity fixtures for `tiny_fixture` weights; null "
        "= the repository's `tests/fixtures/cosyvoice3`.",
    )
    voices_dir: Path | None = Field(
        None,
        description="Also load every `NAME.safetensors` voice file in this folder (precomputed "
        "prompt tokens, mel, speaker embedding and prompt text ids); an invalid file stops "
        "start-up. With random weights the voice is served as `random-NAME`.",
    )
    saved_voices_dir: Path | None = Field(
        None,
        description="Where voices created with `POST /v1/audio/voices` are written (one "
        "`NAME.safetensors` each) and read back at start-up; null = "
        "`$XDG_DATA_HOME/voxflow/voices/MODEL` (`~/.local/share/voxflow/voices/MODEL` without "
        "it), MODEL being the served model name. Created on the first save. Unlike "
        "`voices_dir`, its voices can be deleted through the API.",
    )
    prompt_models_dir: Path | None = Field(
        None,
        description="Folder holding the speaker-embedding and speech-tokenizer ONNX models "
        "(`campplus.onnx`, `speech_tokenizer_v3.onnx`) that turn an uploaded recording into a "
        "voice; null = the checkpoint directory of `weights` when it is one. Without both "
        "files, voices can only be created from a prompt-feature file.",
    )
    default_voice: str | None = Field(
        None,
        description="Voice used when none is named; null = the first voice (`random-tiny` "
        "with `tiny_fixture` weights).",
    )
    device: str = Field(
        "cpu", description='Torch device for all three models: `"cpu"`, `"cuda"` or `"cuda:N"`.'
    )
    token_hop_len: int | None = Field(
        None, ge=1,
        description="Speech tokens per streamed flow call at first (before doubling); null = "
        "half the flow's streaming chunk (25 full size, 5 tiny). Any other value is refused: "
        "it keeps streamed chunks aligned.",
    )
    token_max_hop_len: int | None = Field(
        None, ge=1,
        description="Largest streamed hop in tokens; null = 4 x `token_hop_len` (100 full "
        "size, 20 tiny). A multiple of `token_hop_len`.",
    )
    stream_scale_factor: int = Field(
        2, ge=1, le=8,
        description="Each streamed hop is this many times the last, up to `token_max_hop_len`.",
    )
    token2wav_mode: Literal["streaming", "offline"] = Field(
        "streaming",
        description='`"streaming"`: audio in pieces as tokens arrive (the same bytes whether or '
        'not the client streams); `"offline"`: one flow and vocoder call per segment. '
        "Speed other than 1 always takes the offline path.",
    )
    flow_settled_cache: Literal["auto", "fed", "all", "off"] = Field(
        "auto",
        description="Which streamed segments solve only their new flow frames against a "
        "cache of their settled frames' DiT keys and values (`flow_cache.py`) instead of the "
        "whole prefix at every hop, which costs O(N^2) in a long segment: `\"fed\"` the "
        "segments of WebSocket sessions fed as one generation (unbounded in length), `\"all\"` "
        "every streamed segment (text segments are bounded by `max_segment_chars`, and cached "
        "solves run one segment at a time, outside the flow batch), `\"off\"` none; `\"auto\"` "
        "= `fed` on a CPU device, `off` on CUDA (not measured there; the captured buckets run "
        "the full recompute). Equal to the full recompute up to float rounding. It holds 20 KB "
        "per settled frame tiny, 3.4 MiB full size in float32 (172 MiB per audio second).",
    )
    min_len_rule: Literal["mask_all_stop", "reference_sos_only"] = Field(
        "mask_all_stop",
        description='Before the minimum length (2 tokens per text id), `"mask_all_stop"` '
        'forbids every stop id; `"reference_sos_only"` forbids only the start id, as the '
        "reference does (it may stop after 0-2 tokens; for parity tests).",
    )
    bistream_rule: Literal["corrected", "reference"] = Field(
        "corrected",
        description="Text streamed into one running generation (WebSocket sessions): "
        '`"corrected"` feeds every prompt token, waits for 5 target ids before the first decode '
        "when no prompt group is open, feeds nothing twice, allows only speech or fill before "
        "the end of text and only speech or end after it, and caps the final phase at 20 "
        'tokens per text id; `"reference"` reproduces the reference\'s `inference_bistream` '
        "exactly, defects included (for parity tests).",
    )
    bistream_text_timeout_s: float = Field(
        30.0, gt=0, le=3600,
        description="A generation fed with streamed text (a WebSocket session) that gets no "
        "text and no end for this many seconds is ended (408 `text_timeout`) and its KV cache "
        "freed. While it waits it holds the cache but takes no compute.",
    )
    max_instruction_chars: int = Field(
        1000, ge=1, le=10_000,
        description="Longest `instructions` (style prompt) a request may send, in characters; "
        "longer is a 400 (`instructions_too_long`). Every segment's LM prefill carries them "
        "(about one token per 4 English characters); 1,000 holds the multi-line prompts "
        "OpenAI clients send (a few hundred characters), the reference's own are under 50.",
    )
    top_p: float = Field(
        0.8, gt=0, le=1, description="LM nucleus sampling: smallest set of tokens with this mass."
    )
    top_k: int = Field(
        25, ge=1, le=6761, description="LM nucleus sampling: at most this many tokens."
    )
    ras_win: int = Field(
        10, ge=1, le=1000,
        description="Repetition-aware sampling window: the last this many tokens are checked.",
    )
    ras_tau: float = Field(
        0.1, gt=0, le=1,
        description="Repetition-aware sampling: a token seen at least `ras_win` x `ras_tau` "
        "times in the window is resampled from the full distribution.",
    )
    estimator_dtype: Literal["float32", "bfloat16"] = Field(
        "float32",
        description="Precision of the flow's DiT estimator: its linear, conv and attention "
        "matmuls and activations run in this dtype, while its LayerNorms, attention softmax, "
        "RoPE and time features stay float32, as do the Euler state, the CFG combination, the "
        "LM, HiFT and the rest of the flow. The weights load in float32 and are then cast. "
        "With the tiny fixture weights bfloat16 moves a 10-step mel by at most 0.011 "
        "(float32 matches the reference within 1e-4).",
    )
    lm_max_batch_size: int = Field(
        8, ge=1, le=256,
        description="Most segments the LM decodes together: segments join and leave this "
        "running batch between decode steps (a seeded request's steps run alone, so its bytes "
        "never depend on its batch-mates).",
    )
    flow_max_batch_size: int = Field(
        8, ge=1, le=64,
        description="Most flow solves in one call: the token2wav stage takes up to this many "
        "requests' items at once and solves their flow calls together, per frame bucket "
        "(padded rows are masked, so a row's mel is the row's alone).",
    )
    capture_graphs: bool = Field(
        True,
        description="Capture the flow solve as CUDA graphs at start-up, one per (batch size, "
        "frame bucket), and replay them. Off (or on CPU) every solve runs eagerly; /health and "
        "`voxflow_graph_runs_total` say why.",
    )
    flow_capture_frame_buckets: tuple[int, ...] = Field(
        DEFAULT_FRAME_BUCKETS,
        description="Mel-frame lengths captured as CUDA graphs (sorted and deduplicated; each "
        "whole streaming chunks, at most 15000); a solve pads to the smallest bucket that "
        "fits, and runs eagerly past the largest. `[]` captures nothing (every solve eager).",
    )
    flow_capture_batch_sizes: tuple[int, ...] = Field(
        DEFAULT_BATCH_SIZES,
        description="Batch sizes captured per frame bucket (sorted and deduplicated; at most "
        "`flow_max_batch_size`); a batch runs in the smallest captured size that fits.",
    )
    flow_capture_batch_frames: int = Field(
        8192, ge=0,
        description="Capture only (bucket, batch size) pairs with batch size x frames at most "
        "this (0 = capture nothing).",
    )
    require_graphs: bool = Field(
        False,
        description="Make a failed flow graph capture fatal at start-up (otherwise it is "
        "reported and solves run eagerly). Needs a CUDA device and capture switched on.",
    )
    max_segment_chars: int = shared.max_segment_chars(300, "each segment is one LM request")
    first_segment_chars: int | None = shared.first_segment_chars(120)

    @field_validator("flow_capture_frame_buckets", "flow_capture_batch_sizes")
    @classmethod
    def _sorted_positive(cls, value: tuple[int, ...]) -> tuple[int, ...]:
        bad = [v for v in value if v < 1]
        if bad:
            raise ValueError(f"must be positive integers, got {bad[0]}")
        return tuple(sorted(set(value)))

    @field_validator("device")
    @classmethod
    def _device(cls, value: str) -> str:
        if not _DEVICE.fullmatch(value):
            raise ValueError(f'device must be "cpu", "cuda" or "cuda:N", got "{value}"')
        return value

    @property
    def random_weights(self) -> bool:
        """True for `tiny_fixture` and `full_random`: output is noise (spec §9.4)."""
        return not isinstance(self.weights, Path)

    @property
    def prompt_models_folder(self) -> Path | None:
        """Where the prompt ONNX models are looked for: `prompt_models_dir`, else the
        checkpoint directory, else None (random weights and no folder given)."""
        if self.prompt_models_dir is not None:
            return self.prompt_models_dir
        return self.weights if isinstance(self.weights, Path) else None

    @property
    def static_chunk_size(self) -> int:
        """The DiT streaming chunk in mel frames for these weights (10 tiny, 50 full size)."""
        return TINY_STATIC_CHUNK_SIZE if self.weights == "tiny_fixture" else FULL_STATIC_CHUNK_SIZE

    @property
    def hop_len(self) -> int:
        """`token_hop_len`, or its default: half the streaming chunk."""
        if self.token_hop_len is not None:
            return self.token_hop_len
        return self.static_chunk_size // TOKEN_MEL_RATIO

    @property
    def max_hop_len(self) -> int:
        """`token_max_hop_len`, or its default: 4 x the hop."""
        if self.token_max_hop_len is not None:
            return self.token_max_hop_len
        return MAX_HOP_MULTIPLE * self.hop_len

    @property
    def capture_enabled(self) -> bool:
        """Whether any flow graph is to be captured (`capture_graphs` off, `[]` or a budget of
        0 turns it off)."""
        return (self.capture_graphs and bool(self.flow_capture_frame_buckets)
                and self.flow_capture_batch_frames > 0)

    @model_validator(mode="after")
    def _check(self) -> CosyVoice3Settings:
        self._check_paths()
        self._check_hops()
        self._check_capture()
        check_first_segment(self.first_segment_chars, self.max_segment_chars)
        return self

    def _check_paths(self) -> None:
        if isinstance(self.weights, Path):
            if not self.weights.is_dir():
                raise ValueError(f'weights: "{self.weights}" is neither "tiny_fixture", '
                                 '"full_random" (full-size random weights, for timing) nor an '
                                 "existing checkpoint directory")
            missing = [f for f in CHECKPOINT_FILES if not (self.weights / f).is_file()]
            if missing:
                raise ValueError(f"weights: checkpoint directory {self.weights} lacks "
                                 f"{', '.join(missing)}")
        if self.fixtures_dir is not None and not self.fixtures_dir.is_dir():
            raise ValueError(f"fixtures_dir {self.fixtures_dir} is not a directory")
        if self.voices_dir is not None and not self.voices_dir.is_dir():
            raise ValueError(f"voices_dir {self.voices_dir} is not a directory")
        if self.saved_voices_dir is not None and self.saved_voices_dir.exists() \
                and not self.saved_voices_dir.is_dir():
            raise ValueError(f"saved_voices_dir {self.saved_voices_dir} is not a directory")
        if self.prompt_models_dir is not None and not self.prompt_models_dir.is_dir():
            raise ValueError(f"prompt_models_dir {self.prompt_models_dir} is not a directory")

    def _check_hops(self) -> None:
        chunk = self.static_chunk_size
        hop = self.hop_len
        if hop * TOKEN_MEL_RATIO != chunk:
            raise ValueError(
                f"token_hop_len {hop} must be static_chunk_size/{TOKEN_MEL_RATIO} = "
                f"{chunk // TOKEN_MEL_RATIO} for {self._weights_name()} weights"
            )
        top = self.max_hop_len
        if top < hop or top % hop:
            raise ValueError(f"token_max_hop_len {top} must be a multiple of token_hop_len "
                             f"{hop} (and at least it)")

    def _check_capture(self) -> None:
        chunk = self.static_chunk_size
        for frames in self.flow_capture_frame_buckets:
            if frames > NOISE_FRAMES:
                raise ValueError(f"flow_capture_frame_buckets: {frames} frames pass the "
                                 f"{NOISE_FRAMES}-frame flow noise")
            if frames % chunk:
                raise ValueError(f"flow_capture_frame_buckets: {frames} is not whole "
                                 f"{chunk}-frame streaming chunks")
        too_big = [b for b in self.flow_capture_batch_sizes if b > self.flow_max_batch_size]
        if too_big:
            raise ValueError(f"flow_capture_batch_sizes: {too_big[0]} exceeds "
                             f"flow_max_batch_size {self.flow_max_batch_size} (drop it from "
                             "the list or raise the cap)")
        if self.require_graphs:
            if not self.device.startswith("cuda"):
                raise ValueError(f"require_graphs needs a CUDA device, not {self.device}")
            if not self.capture_enabled:
                raise ValueError("require_graphs is set but capture is off (capture_graphs false, "
                                 "flow_capture_frame_buckets [] or flow_capture_batch_frames 0)")

    def _weights_name(self) -> str:
        return str(self.weights) if not isinstance(self.weights, Path) else "checkpoint"
