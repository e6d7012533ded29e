"""Settings of the Kokoro family (the `options` of a `family: kokoro` model in a config)."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from voxflow.models import shared_settings as shared
from voxflow.models.shared_settings import check_first_segment


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

    cache_dir: Path = Field(
        default_factory=default_cache_dir,
        description="Folder for the ONNX model joined from the four part packages (~92 MB, "
        "created if missing); the loader writes nowhere else.",
        json_schema_extra={"doc_default": "~/.cache/voxflow/kokoro"},
    )
    default_voice: str = Field(
        "jf_alpha",
        description="Voice used when none is named: `jf_alpha`, `jf_gongitsune`, `jf_nezumi`, "
        "`jf_tebukuro` (female), `jm_kumo` (male).",
    )
    intra_op_threads: int = Field(
        2, ge=1, le=256,
        description="ONNX Runtime threads inside one op (one session for all voices, shared "
        "by the workers; with more than one worker its idle threads do not spin). A run "
        "alone gets them all; two runs at once share them (on 2 cores two 120-token runs "
        "together took 5.34 s on a shared two-thread session, 5.23 s on one thread each, "
        "while one run alone took 2.77 s against 4.74 s).",
    )
    inter_op_threads: int = Field(
        1, ge=1, le=256, description="ONNX Runtime threads across ops."
    )
    workers: int = Field(
        2, ge=1, le=64,
        description="Acoustic worker threads sharing the session; the graph runs one segment "
        "at a time.",
    )
    max_segment_chars: int = shared.max_segment_chars(
        300, "a segment past the graph's 510-token limit is cut again at punctuation"
    )
    first_segment_chars: int | None = shared.first_segment_chars(100)
    # Off by default: on a 2-core Zen 1 host, where Kokoro runs at RTF 1.3, 30 characters with
    # growth 2 cut a lone request's first audio from 6.74 to 2.86 s but stalled every request
    # and cost 12% more compute per audio second (docs/benchmarks-archive.md). It pays only
    # where the graph runs at RTF below 1 / segment_growth.
    segment_growth: float | None = Field(
        None, ge=1.0, le=10.0,
        description="With `first_segment_chars`, each later segment's cap is this many times "
        "the length of the segment before it (at most `max_segment_chars`), so each is "
        "rendered before the audio of the one before it has played (Kokoro renders a whole "
        "segment before any of its audio; it pays where the graph runs at a real-time "
        "factor below 1 / segment_growth); null = every later cap is `max_segment_chars`.",
    )
    deadline_cuts: bool = Field(
        True,
        description="Cut a segment at schedule time when its whole run is predicted to end "
        "after its listener's deadline (a first audio's `engine.ttfa_target_s`, or the end of "
        "the audio already sent): the largest head that ends in time is rendered now, at a "
        "space of its phonemes, the rest queued as the segment's next part and sized again "
        "when it runs. The prediction is the measured pace per number of runs in progress. "
        "Never for a seeded request (its bytes must not depend on the load), nor for a whole "
        "(non-streamed) response, nor where even a head of `MIN_CUT_TOKENS` (12, about two words; "
        "voxflow.models.kokoro.model) would be late (the whole segment is then cheapest).",
    )
    # Kokoro pads each segment with up to ~0.3 s of silence before and ~0.6 s after the speech.
    segment_pause_s: float = Field(
        0.25, ge=0.0, le=2.0,
        description="Most silence kept after each segment (the pause between segments); 50 ms "
        "is kept before it.",
    )
    cut_pause_s: float = Field(
        0.1, ge=0.0, le=2.0,
        description="Most silence kept after a segment that ends inside a sentence (a first "
        "segment cut short at a clause or a space for time to first audio), so the cut "
        "sounds like a comma, not a full stop.",
    )
    # From benchmarks/speed_range.py (jm_kumo, 12 sentences): native durations run a
    # little long, within 5% for every sentence only from 0.6 (-1.9%, worst -4.6%) to 1.1
    # (-2.6%, worst -4.3%; 0.5: worst -7.1%, 1.2: -5.7%), and Whisper's word error rate rises
    # past 1.2 (6 sentences, 1.3: 8%, 1.5: 19%: the graph rounds short phonemes away).
    native_speed_min: float = shared.native_speed_min(0.6)
    native_speed_max: float = shared.native_speed_max(1.1)

    @field_validator("cache_dir")
    @classmethod
    def _cache_dir(cls, path: Path) -> Path:
        path = path.expanduser()
        if path.exists() and not path.is_dir():
            raise ValueError(f"cache_dir {path} exists and is not a directory")
        return path

    @model_validator(mode="after")
    def _check(self) -> KokoroSettings:
        check_first_segment(self.first_segment_chars, self.max_segment_chars)
        return self
