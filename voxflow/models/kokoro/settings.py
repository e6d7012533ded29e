"""Settings of the Kokoro family (the `options` of a `family: kokoro` model in a config)."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator


def default_cache_dir() -> Path:
    """Where the joined ONNX model is kept unless `cache_dir` says otherwise."""
    return Path.home() / ".cache" / "voxflow" / "kokoro"


class KokoroSettings(BaseModel):
    """Where the joined model lives, which voice is the default, and how the stages run.

    The acoustic graph takes one segment per run (its batch dimension is fixed at 1), so
    throughput comes from `workers` threads sharing one ONNX Runtime session; total compute
    threads are ``workers * intra_op_threads``.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    # Folder for the ONNX model joined from the four part packages (created if missing). The
    # loader writes nowhere else.
    cache_dir: Path = Field(default_factory=default_cache_dir)
    default_voice: str = "jf_alpha"
    intra_op_threads: int = Field(1, ge=1, le=256)
    inter_op_threads: int = Field(1, ge=1, le=256)
    workers: int = Field(2, ge=1, le=64)
    # Segments are sentences, and pieces of long sentences at most this many characters; a
    # segment whose phonemes pass the graph's 510-token limit is cut again at punctuation.
    max_segment_chars: int = Field(300, ge=20, le=2000)
    # The first segment of a request is capped shorter, for time to first audio; null = no cap.
    first_segment_chars: int | None = Field(100, ge=10)
    # Kokoro pads each segment with up to ~0.3 s of silence before and ~0.6 s after the speech;
    # at most this much silence is kept after each segment (the pause between segments), and
    # 50 ms before it.
    segment_pause_s: float = Field(0.25, ge=0.0, le=2.0)
    # Speeds the model's own length scale renders cleanly (docs/api.md "Speed"): a segment is
    # synthesized at its speed clamped to this range, then time-stretched (pitch kept) by the
    # rest. From benchmarks/speed_range.py (jm_kumo, 12 sentences): native durations run a
    # little long, within 5% for every sentence only from 0.6 (-1.9%, worst -4.6%) to 1.1
    # (-2.6%, worst -4.3%; 0.5: worst -7.1%, 1.2: -5.7%), and Whisper's word error rate rises
    # past 1.2 (6 sentences, 1.3: 8%, 1.5: 19%: the graph rounds short phonemes away).
    native_speed_min: float = Field(0.6, ge=0.25, le=1.0)
    native_speed_max: float = Field(1.1, ge=1.0, le=4.0)

    @field_validator("cache_dir")
    @classmethod
    def _cache_dir(cls, path: Path) -> Path:
        path = path.expanduser()
        if path.exists() and not path.is_dir():
            raise ValueError(f"cache_dir {path} exists and is not a directory")
        return path

    @model_validator(mode="after")
    def _check(self) -> KokoroSettings:
        first = self.first_segment_chars
        if first is not None and first > self.max_segment_chars:
            raise ValueError("first_segment_chars must not exceed max_segment_chars")
        return self
