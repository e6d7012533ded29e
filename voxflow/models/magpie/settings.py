"""Settings of the MagpieTTS family (the `options` of a `family: magpie` model; spec §8.3),
listed in docs/configuration.md. Kept free of torch: validated before any weights load.

Only random weights exist here (spec §0), so both models are built at load and everything
served is noise, labelled so: `acoustic: tiny_random` (a tiny MagpieTTS in NeMo's key layout,
random values from `acoustic_seed`), `codec_weights: tiny_fixture` (the NeMo-made tiny decoder
of `tests/fixtures/nanocodec`) or `full_random` (the full-size decoder, random values).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from voxflow.models import shared_settings as shared
from voxflow.models.shared_settings import check_first_segment

_DEVICE = re.compile(r"cpu|cuda(:\d+)?")
TINY_CONTEXT_FRAMES = 5  # baked speaker frames of the tiny model (spec §7.6)
TINY_DECODER_POSITIONS = 2048  # as the full-size decoder (spec §7.2)


class MagpieSettings(BaseModel):
    """Weights, voices, codec streaming and MagpieTTS decoding (spec §8.3).

    Sampling: `greedy` takes the argmax everywhere (byte-identical reruns); otherwise codes are
    sampled with `top_k` / `temperature` from a generator per segment seeded from the request's
    seed and the segment index, so a seeded request repeats its bytes.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    acoustic: Literal["tiny_random"] = Field(
        "tiny_random",
        description='`"tiny_random"`: a tiny MagpieTTS (d_model 32, 2 + 2 layers, 2 baked '
        "speakers, text vocabulary 20) in NeMo's state-dict layout with random values, built "
        "and strictly loaded at start-up: output is noise, labelled as such. Checkpoints "
        "(`.nemo`) are not served yet.",
    )
    acoustic_seed: int = Field(
        0, ge=0, description="Seed of the `tiny_random` weights (the same seed, the same model)."
    )
    frame_stacking: Literal[1, 2] = Field(
        1,
        description="Codec frames per decoder step of the `tiny_random` model (1: the older "
        "revision's layout, 2: the newer one's, spec §7.1).",
    )
    codec_weights: Literal["tiny_fixture", "full_random"] | Path = Field(
        "tiny_fixture",
        description='`"tiny_fixture"`: the tiny NanoCodec decoder made by NeMo (96 samples per '
        'frame, `codec_fixtures_dir`); `"full_random"`: the full-size decoder (1024 samples '
        "per frame) with random values; or a NanoCodec `.nemo` file (its `model_config.yaml` "
        "gives the decoder's sizes; keys and FSQ buffers checked at start-up). With the "
        "random acoustic model the output is noise whatever the codec.",
    )
    codec_fixtures_dir: Path | None = Field(
        None,
        description="Folder holding `tiny_decoder_state_dict.safetensors`; null = the "
        "repository's `tests/fixtures/nanocodec`.",
    )
    codec_chunk_frames: int = Field(
        4, ge=1, le=64,
        description="Codec frames decoded per streamed chunk (4 = 4096 samples, 186 ms at full "
        "size); the acoustic stage hands frames on in parts of this size and a segment's last "
        "chunk may be shorter. The bytes depend on it (never compare hashes across values), "
        "not on the HTTP `stream` flag.",
    )
    codec_capture_chunk_frames: tuple[int, ...] | None = Field(
        None,
        description="Chunk lengths captured as CUDA graphs at start-up (CUDA only); null = "
        "`codec_chunk_frames` alone; `[]` = every chunk runs eagerly.",
    )
    codec_max_streams: int = Field(
        32, ge=1, le=4096,
        description="Codec state slots preallocated on the device (a request in flight holds "
        "at most one, for the segment it is decoding; 0.75 MB each at full size); at least "
        "`engine.max_inflight_requests` (checked at start-up).",
    )
    codec_dtype: Literal["float32"] = Field(
        "float32", description="Codec weight and state precision (only float32 yet)."
    )
    codec_max_batch_size: int = Field(
        8, ge=1, le=64, description="Most requests' codec chunks decoded in one batched step."
    )
    codec_batch_invariant: bool = Field(
        True,
        description="Every codec step decodes `codec_max_batch_size` rows (scratch rows pad "
        "the real ones), so a request's bytes never depend on what else is in flight (a "
        "batched conv may round differently: up to 3 LSB on an H200 at concurrency 8). Off: "
        "steps pad only to a captured graph's rows and are cheaper at low concurrency.",
    )
    acoustic_max_batch_size: int = Field(
        8, ge=1, le=256,
        description="Most segments in the acoustic stage's running set (each steps alone: no "
        "batched decoder step yet).",
    )
    greedy: bool = Field(
        False,
        description="Argmax decoding everywhere (top-k 1): the same text gives the same bytes "
        "whatever the seed. Otherwise seeded top-k / temperature sampling.",
    )
    cfg_scale: float = Field(
        2.5, ge=0.0, le=20.0,
        description="Classifier-free guidance: logits (1 - s)·uncond + s·cond; 1 = the "
        "conditional row alone.",
    )
    top_k: int = Field(80, ge=1, le=2024, description="Sampling keeps the k most likely codes.")
    temperature: float = Field(
        0.6, gt=0.0, le=10.0, description="Sampling temperature of the local transformer."
    )
    min_frames: int = Field(
        4, ge=0, le=100, description="No end-of-speech before this many codec frames."
    )
    max_frames: int = Field(
        500, ge=1, le=2000,
        description="A segment stops after this many codec frames without end-of-speech "
        "(counted in `/health` as truncations).",
    )
    attention_prior: bool = Field(
        True, description="Apply the inference attention prior to the cross-attention."
    )
    kv_cache: bool = Field(
        True,
        description="Keep decoder self-attention K/V between steps (else recompute the whole "
        "history every step, as NeMo's reference does).",
    )
    device: str = Field("cpu", description='Torch device: `"cpu"`, `"cuda"` or `"cuda:N"`.')
    default_voice: str | None = Field(
        None, description="Voice used when none is named; null = `random-0`."
    )
    max_segment_chars: int = shared.max_segment_chars(200, "one decode per segment")
    first_segment_chars: int | None = shared.first_segment_chars(80)

    @field_validator("device")
    @classmethod
    def _device(cls, value: str) -> str:
        if not _DEVICE.fullmatch(value):
            raise ValueError(f'device must be "cpu", "cuda" or "cuda:N", got "{value}"')
        return value

    @field_validator("codec_capture_chunk_frames")
    @classmethod
    def _chunks(cls, value: tuple[int, ...] | None) -> tuple[int, ...] | None:
        if value is None:
            return None
        bad = [v for v in value if v < 1]
        if bad:
            raise ValueError(f"chunk lengths must be positive, got {bad[0]}")
        return tuple(sorted(set(value)))

    @property
    def random_weights(self) -> bool:
        """Always True here: no checkpoint is served yet, so the output is noise."""
        return True

    def check_engine(self, engine: Any) -> None:
        """Checks against the engine's settings (called once by `voxflow.config.load_settings`).

        Raises:
            ValueError: fewer codec slots than requests may be in flight (one would fail
                mid-stream with `PoolExhausted`).
        """
        inflight = int(engine.max_inflight_requests)
        if self.codec_max_streams < inflight:
            raise ValueError(f"codec_max_streams {self.codec_max_streams} is below "
                             f"engine.max_inflight_requests {inflight}: each request in flight "
                             "may hold a codec slot")

    @model_validator(mode="after")
    def _check(self) -> MagpieSettings:
        if self.min_frames > self.max_frames:
            raise ValueError(f"min_frames {self.min_frames} exceeds max_frames {self.max_frames}")
        if self.max_frames < self.frame_stacking:
            raise ValueError(f"max_frames {self.max_frames} is below one decoder step "
                             f"({self.frame_stacking} frames)")
        if self.max_frames // self.frame_stacking + TINY_CONTEXT_FRAMES + 1 \
                > TINY_DECODER_POSITIONS:
            raise ValueError(f"max_frames {self.max_frames} passes the decoder's "
                             f"{TINY_DECODER_POSITIONS} positions")
        if isinstance(self.codec_weights, Path) and not self.codec_weights.is_file():
            raise ValueError(f'codec_weights: "{self.codec_weights}" is neither "tiny_fixture", '
                             '"full_random" nor an existing .nemo file')
        if self.codec_fixtures_dir is not None and not self.codec_fixtures_dir.is_dir():
            raise ValueError(f"codec_fixtures_dir {self.codec_fixtures_dir} is not a directory")
        check_first_segment(self.first_segment_chars, self.max_segment_chars)
        return self
