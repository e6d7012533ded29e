"""The `voxflow` command line: `serve`, `speak`, `voices`, `bench` and `eval`.

- ``voxflow serve``: load and validate the settings, log them as JSON, run the HTTP server.
- ``voxflow speak``: synthesize text (an argument or a file) in process, without a server, and
  write it to a file or stdout in any supported format.
- ``voxflow voices``: load the models and list their voices.
- ``voxflow bench run|compare``: measure a speech server, or compare servers started in
  rotation (`voxflow.bench`; docs/benchmarks.md).
- ``voxflow eval wer|speaker``: word error rate and speaker similarity of audio clips
  (`voxflow.eval`).

Settings come from ``--config FILE`` (default: ``configs/piper.yaml`` when it exists relative to
the working directory, else the built-in defaults) with ``--set section.field=value`` overrides.

Exit status: 0 on success; 1 when a model fails to load or synthesis fails inside the engine
(bench: a server fails, or ``--check`` finds differences); 2 for a usage, configuration or input
error (printed as ``voxflow: <message>``, no traceback); 3 when the bench's idle gate times out;
130 when interrupted.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np
from tqdm import tqdm

from voxflow import __version__
from voxflow.audio.encode import encode_audio
from voxflow.audio.formats import FORMATS, check_format
from voxflow.audio.stream import StreamEncoder
from voxflow.bench import options as bench_options
from voxflow.bench.adapters import ENGINES
from voxflow.config import ConfigError, Settings, load_settings, parse_override
from voxflow.engine.engine import SPEED_MAX, SPEED_MIN, Engine
from voxflow.engine.request import SpeechRequest
from voxflow.engine.stream import SpeechStream
from voxflow.errors import VoxflowError
from voxflow.logging_setup import configure_logging
from voxflow.models.base import ModelFamily
from voxflow.models.registry import family_class

log = logging.getLogger(__name__)

DEFAULT_CONFIG = Path("configs/piper.yaml")
"""Used when ``--config`` is not given and this file exists (relative to the working dir)."""

SPEAK_DEFAULTS: dict[str, Any] = {
    # One synthesis runs in process: a warm-up run would only add start-up time.
    "engine.warmup": False,
    # A long file is one request; the server's per-request deadline must not cut it short.
    "engine.request_timeout_s": 7 * 24 * 3600.0,
}
"""Overrides `speak` applies before the user's ``--set`` (which can replace them)."""

SUFFIX_FORMATS: dict[str, str] = {
    **{f".{fmt}": fmt for fmt in FORMATS},
    ".raw": "pcm",
    ".ogg": "opus",
}
"""Output file suffix -> audio format, for `speak` without ``--format``."""

STDOUT = "-"


class CliError(Exception):
    """A failure reported as ``voxflow: <message>`` with exit status `exit_code`."""

    def __init__(self, message: str, exit_code: int = 2):
        super().__init__(message)
        self.exit_code = exit_code


# ---- argument parsing ---------------------------------------------------------------------------
def _settings_options() -> argparse.ArgumentParser:
    """The options every command shares: ``--config`` and ``--set``."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--config", metavar="FILE",
        help=f"deployment YAML (default: {DEFAULT_CONFIG} if it exists, else built-in defaults)",
    )
    common.add_argument(
        "--set", dest="overrides", metavar="KEY=VALUE", action="append", default=[],
        help="override a setting, e.g. server.port=9000 or models.0.options.workers=4 "
        "(VALUE is read as YAML; repeatable)",
    )
    return common


def _add_serve(commands, common: argparse.ArgumentParser) -> None:
    p = commands.add_parser(
        "serve", parents=[common], help="run the HTTP server (OpenAI-compatible speech API)",
        description="Load the settings, start the engine and serve the HTTP API.",
    )
    p.add_argument("--host", help="bind address (server.host)")
    p.add_argument("--port", type=int, help="TCP port (server.port)")
    p.set_defaults(handler=cmd_serve)


def _add_speak(commands, common: argparse.ArgumentParser) -> None:
    p = commands.add_parser(
        "speak", parents=[common], help="synthesize text to an audio file, without a server",
        description="Synthesize TEXT (or the contents of -f FILE) in process and write audio.",
    )
    source = p.add_mutually_exclusive_group()
    source.add_argument("text", nargs="?", metavar="TEXT", help="text to speak")
    source.add_argument("-f", "--file", metavar="FILE", help="read the text from FILE (- = stdin)")
    p.add_argument(
        "-o", "--output", required=True, metavar="OUT",
        help="output file; its suffix gives the format (.wav, .mp3, ...); - = stdout",
    )
    p.add_argument("--model", help="served model name (default: the first in the config)")
    p.add_argument("--voice", help="voice id (default: the model's default voice)")
    p.add_argument(
        "--format", dest="fmt", metavar="FORMAT",
        help=f"audio format: {', '.join(FORMATS)} (default: from OUT's suffix)",
    )
    p.add_argument("--speed", type=float, default=1.0, help="speaking rate, 0.25 to 4 (1)")
    p.add_argument("--seed", type=int, help="seed for reproducible audio (same bytes every run)")
    p.add_argument(
        "--progress", action=argparse.BooleanOptionalAction, default=None,
        help="show a progress bar on stderr (default: when stderr is a terminal)",
    )
    p.add_argument("-v", "--verbose", action="store_true", help="log engine details to stderr")
    p.set_defaults(handler=cmd_speak)


def _add_voices(commands, common: argparse.ArgumentParser) -> None:
    p = commands.add_parser(
        "voices", parents=[common], help="list the voices of the configured models",
        description="Load the configured models and list their voices.",
    )
    p.add_argument("--model", help="only this served model")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.add_argument("-v", "--verbose", action="store_true", help="log loading details to stderr")
    p.set_defaults(handler=cmd_voices)


def _add_bench(commands) -> None:
    bench = commands.add_parser(
        "bench", help="measure speech servers: latency, throughput, streaming, determinism",
        description="Benchmark a server that speaks the OpenAI speech API (or piper-tts's "
        "HTTP server). See docs/benchmarks.md.",
    )
    kinds = bench.add_subparsers(dest="bench_command", metavar="KIND", required=True)
    run = kinds.add_parser(
        "run", help="one server: a concurrency sweep, or --check N for reproducibility",
        description="Measure one running server: TTFA, latency, audio-s/s, RTF and stalls per "
        "concurrency level, after an idle gate.",
    )
    run.add_argument("--engine", choices=ENGINES, default="openai",
                     help="server API: openai (voxflow and others) or piper-http (default: openai)")
    run.add_argument("--url", default="http://127.0.0.1:8000",
                     help="server base URL (http://127.0.0.1:8000)")
    run.add_argument("--server-repo", metavar="DIR",
                     help="git checkout the server runs from, for the report (default: .)")
    run.add_argument("--check", type=bench_options.positive_int, metavar="N",
                     help="no timing: run each case N times, print each run's audio sha256, "
                     "exit 1 if runs with the same seed differ")
    run.add_argument("--save-audio-dir", type=Path, metavar="DIR",
                     help="save each measured request's audio as DIR/CASE/cC-rR/TEXT_REQ.wav")
    compare = kinds.add_parser(
        "compare", help="start servers in rotation (a b b a ...) and compare them",
        description="Start each arm's server, wait for health, run the same bench, stop it; "
        "rotate the arms for --runs starts each; print medians, ranges, ratios, verdicts.",
    )
    compare.add_argument(
        "--arm", dest="arms", action="append", required=True, metavar="NAME[:ENGINE]=COMMAND",
        help="a server start command with {port}; the first arm is the base (2 or 3 arms)")
    compare.add_argument("--arm-cwd", type=bench_options.named_folder, action="append",
                         default=[], metavar="NAME=DIR", help="run arm NAME's command in DIR")
    compare.add_argument("--engine", choices=ENGINES, default="openai",
                         help="engine of arms that name none (openai)")
    compare.add_argument("--runs", type=bench_options.positive_int, default=3, metavar="N",
                         help="server starts per arm (3)")
    compare.add_argument("--health-timeout", type=bench_options.positive_float, default=180.0,
                         metavar="S", help="seconds a server may take to become ready (180)")
    compare.add_argument("--retakes", type=bench_options.non_negative_int, default=2,
                         metavar="N", help="measure a level again (at most N times) when other "
                         "processes averaged more than --idle-cpu-max during it (2)")
    compare.add_argument("--quality", action="store_true",
                         help="also word error rate and speaker similarity of each arm")
    compare.add_argument("--ref", type=Path, metavar="REF.wav",
                         help="speaker reference for --quality (default: the base arm's clips)")
    compare.add_argument("--work-dir", type=Path, metavar="DIR",
                         help="server logs and quality clips (default: a new temp folder)")
    for p in (run, compare):
        bench_options.add_request_options(p)
        bench_options.add_input_options(p)
        bench_options.add_sweep_options(p)
        bench_options.add_gate_options(p)
        bench_options.add_output_options(p)
    run.set_defaults(handler=cmd_bench)
    compare.set_defaults(handler=cmd_bench)


def _add_eval(commands) -> None:
    from voxflow.eval.command import named_folder

    evaluate = commands.add_parser(
        "eval", help="quality of audio clips: word error rate, speaker similarity",
        description="Evaluate audio clips offline (Whisper tiny.en, Resemblyzer).",
    )
    kinds = evaluate.add_subparsers(dest="eval_command", metavar="KIND", required=True)
    wer = kinds.add_parser(
        "wer", help="word error rate of clips against their texts",
        description="Transcribe each clip (NNN*.wav says line NNN of --sentences, from 0), "
        "normalize both sides (case, punctuation, numbers as words) and print the word "
        "error rate per clip and overall.",
    )
    wer.add_argument("--audio-dir", type=Path, required=True, metavar="DIR")
    wer.add_argument("--sentences", type=Path, required=True, metavar="FILE")
    wer.add_argument("--threads", type=bench_options.positive_int, default=2,
                     help="ASR CPU threads (2)")
    wer.add_argument("--out", type=Path, metavar="FILE.json", help="write the result as JSON")
    speaker = kinds.add_parser(
        "speaker", help="speaker similarity to a reference, and clip identity between folders",
        description="Cosine similarity of each clip's Resemblyzer embedding to the reference "
        "(mean and min per folder); for each pair of folders, clip by clip: identical bytes, "
        "different length, or same length with its SNR in dB.",
    )
    speaker.add_argument("--ref", type=Path, required=True, metavar="REF.wav")
    speaker.add_argument("folders", type=named_folder, nargs="+", metavar="NAME=DIR")
    speaker.add_argument("--out", type=Path, metavar="FILE.json", help="write the result as JSON")
    wer.set_defaults(handler=cmd_eval)
    speaker.set_defaults(handler=cmd_eval)


def build_parser() -> argparse.ArgumentParser:
    """The `voxflow` argument parser with its five commands."""
    parser = argparse.ArgumentParser(
        prog="voxflow",
        description="voxflow: a serving engine for text-to-speech models with an "
        "OpenAI-compatible speech API.",
    )
    parser.add_argument("--version", action="version", version=f"voxflow {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    common = _settings_options()
    _add_serve(commands, common)
    _add_speak(commands, common)
    _add_voices(commands, common)
    _add_bench(commands)
    _add_eval(commands)
    return parser


# ---- settings -----------------------------------------------------------------------------------
def load_cli_settings(
    args: argparse.Namespace,
    before: dict[str, Any] | None = None,
    after: dict[str, Any] | None = None,
) -> Settings:
    """Settings from ``--config`` (or the default file) with overrides applied in order.

    Args:
        args: parsed arguments with `config` and `overrides` (``KEY=VALUE`` strings).
        before: overrides a command applies first (its own defaults; ``--set`` can replace them).
        after: overrides that win over ``--set`` (dedicated flags such as ``--port``).

    Raises:
        ConfigError: missing or invalid file, malformed ``--set``, invalid field.
    """
    path = args.config
    if path is None and DEFAULT_CONFIG.is_file():
        path = DEFAULT_CONFIG
    overrides = dict(before or {})
    for text in args.overrides:
        key, value = parse_override(text)
        overrides[key] = value
    overrides.update(after or {})
    return load_settings(path, overrides)


def only_model(settings: Settings, name: str | None) -> Settings:
    """`settings` serving just model `name` (all models when None).

    Raises:
        CliError: `name` is not a model of the settings.
    """
    if name is None:
        return settings
    for spec in settings.models:
        if spec.name == name:
            return settings.model_copy(update={"models": [spec]})
    served = ", ".join(m.name for m in settings.models)
    raise CliError(f"unknown model '{name}'; models in the config: {served}")


# ---- serve --------------------------------------------------------------------------------------
def cmd_serve(args: argparse.Namespace) -> int:
    """Run the HTTP server until interrupted."""
    flags = {"server.host": args.host, "server.port": args.port}
    settings = load_cli_settings(args, after={k: v for k, v in flags.items() if v is not None})
    configure_logging(settings.server.log_level)
    log.info("settings: %s", settings.model_dump_json())
    _check_port_free(settings.server.host, settings.server.port)

    import uvicorn

    from voxflow.server.app import create_app

    uvicorn.run(
        create_app(settings),
        host=settings.server.host,
        port=settings.server.port,
        log_level=settings.server.log_level,
        timeout_graceful_shutdown=settings.server.shutdown_grace_s,
    )
    return 0


def _check_port_free(host: str, port: int) -> None:
    """Fail before loading any model when the address is taken (uvicorn would only find out
    after the models loaded and warmed up, and exit with its own status 3)."""
    import socket

    if port == 0:
        return
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError as exc:
            raise CliError(f"cannot listen on {host}:{port}: {exc.strerror}") from None


# ---- speak --------------------------------------------------------------------------------------
@dataclass(frozen=True)
class SpeakResult:
    """What `speak` did: samples written, their rate, and the timings."""

    samples: int
    sample_rate: int
    load_s: float
    synth_s: float

    @property
    def audio_s(self) -> float:
        return self.samples / self.sample_rate

    @property
    def rtf(self) -> float:
        """Synthesis wall seconds (model load excluded) per second of audio."""
        return self.synth_s / self.audio_s if self.audio_s > 0 else float("inf")


def read_text(text: str | None, file: str | None) -> str:
    """The text to speak, from the argument or the file (``-`` = stdin); never empty.

    Raises:
        CliError: neither or an unreadable file, or only whitespace.
    """
    if file is None and text is None:
        raise CliError("give the text to speak, or -f FILE")
    if file is not None:
        try:
            text = sys.stdin.read() if file == STDOUT else Path(file).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            reason = getattr(exc, "strerror", None) or str(exc)
            raise CliError(f"cannot read {file}: {reason}") from None
    assert text is not None
    if not text.strip():
        where = "stdin" if file == STDOUT else file
        raise CliError(f"{where} has no text to speak" if file else "the text to speak is empty")
    return text


def output_format(output: str, fmt: str | None) -> str:
    """The audio format: ``--format`` if given, else from the output file's suffix.

    Raises:
        CliError: unknown format, or no ``--format`` with stdout or an unknown suffix.
    """
    if fmt is not None:
        try:
            return check_format(fmt.lower())
        except ValueError as exc:
            raise CliError(str(exc)) from None
    if output == STDOUT:
        raise CliError(f"writing to stdout needs --format ({', '.join(FORMATS)})")
    suffix = Path(output).suffix.lower()
    if suffix not in SUFFIX_FORMATS:
        known = ", ".join(SUFFIX_FORMATS)
        raise CliError(
            f"cannot tell the audio format of '{output}' (known suffixes: {known}); "
            "pass --format"
        )
    return SUFFIX_FORMATS[suffix]


def check_request(args: argparse.Namespace) -> None:
    """Reject a bad output path, speed or seed before any model is loaded.

    Raises:
        CliError: the output's folder does not exist, speed out of range, negative seed.
    """
    if args.output != STDOUT:
        folder = Path(args.output).parent
        if not folder.is_dir():
            raise CliError(f"cannot write {args.output}: folder {folder} does not exist")
    if not SPEED_MIN <= args.speed <= SPEED_MAX:
        raise CliError(f"--speed must be between {SPEED_MIN} and {SPEED_MAX}, got {args.speed}")
    if args.seed is not None and args.seed < 0:
        raise CliError(f"--seed must be a non-negative integer, got {args.seed}")


class AudioOutput:
    """Where `speak` writes: a file or stdout.

    Stdout and ``pcm`` files get bytes as chunks arrive (`StreamEncoder`; a streamed ``wav``
    has unknown-length sizes). Other files are encoded whole at the end with `encode_audio`,
    so their headers are exact (wav sizes, FLAC STREAMINFO, mp3 gapless info); a failed run
    leaves no file behind.
    """

    def __init__(self, target: str, fmt: str):
        self.target, self.fmt = target, fmt
        self.streaming = target == STDOUT or fmt == "pcm"
        self._parts: list[np.ndarray] = []
        self._encoder: StreamEncoder | None = None
        self._file: BinaryIO | None = None

    def write(self, samples: np.ndarray, sample_rate: int) -> None:
        """Add the next chunk of audio, (N,) float32 at `sample_rate` Hz."""
        if not self.streaming:
            self._parts.append(samples)
            return
        if self._encoder is None:
            self._encoder = StreamEncoder(self.fmt, sample_rate)
            self._file = sys.stdout.buffer if self.target == STDOUT else open(self.target, "wb")
        self._emit(self._encoder.push(samples))

    def finish(self, sample_rate: int) -> None:
        """Complete the output (flush the stream, or encode and write the whole file)."""
        if not self.streaming:
            audio = np.concatenate(self._parts) if self._parts else np.zeros(0, np.float32)
            Path(self.target).write_bytes(encode_audio(audio, sample_rate, self.fmt))
            return
        if self._encoder is None:  # no chunk at all: still write a valid (empty) stream
            self.write(np.zeros(0, np.float32), sample_rate)
        assert self._encoder is not None
        self._emit(self._encoder.finish())
        self._close_file()

    def abort(self) -> None:
        """Give up after a failure: free the encoder, remove a partly written file."""
        if self._encoder is not None:
            self._encoder.close()
        if self._file is not None and self.target != STDOUT:
            self._close_file()
            Path(self.target).unlink(missing_ok=True)

    def _emit(self, data: bytes) -> None:
        assert self._file is not None
        if data:
            self._file.write(data)
            self._file.flush()

    def _close_file(self) -> None:
        if self._file is not None and self.target != STDOUT:
            self._file.close()
        self._file = None


def _progress_bar(show: bool) -> tqdm:
    """A segment counter on stderr; its total is set once the text has been segmented."""
    return tqdm(
        total=None, unit="seg", desc="synthesizing", file=sys.stderr, disable=not show,
        dynamic_ncols=True, leave=False,
    )


async def _drain(stream: SpeechStream, output: AudioOutput, show_progress: bool) -> int:
    """Write every chunk of `stream` to `output`; returns the number of samples."""
    samples = 0
    with _progress_bar(show_progress) as bar:
        async with stream:
            async for chunk in stream:
                output.write(chunk.samples, chunk.sample_rate)
                samples += int(chunk.samples.size)
                total = stream.state.segments_total
                if bar.total is None and total is not None:
                    bar.total = total
                if chunk.samples.size:
                    bar.update(1)
                bar.set_postfix_str(f"{samples / chunk.sample_rate:.1f} s audio", refresh=False)
    return samples


async def _start_engine(settings: Settings) -> tuple[Engine, float]:
    """Load the models (no warm-up unless configured); returns the engine and load seconds."""
    engine = Engine(settings)
    t0 = time.perf_counter()
    try:
        await engine.start()
    except Exception as exc:
        engine.stop()
        name = next((m.name for m in engine.models.values() if m.status == "failed"), "?")
        raise CliError(f"model '{name}' failed to load: {exc}", exit_code=1) from None
    return engine, time.perf_counter() - t0


async def synthesize(
    settings: Settings, args: argparse.Namespace, text: str, output: AudioOutput, progress: bool
) -> SpeakResult:
    """Start an engine for `settings`, synthesize `text` into `output`, stop the engine.

    Raises:
        CliError: a model fails to load (exit 1), the request is rejected (unknown voice,
            nothing speakable: exit 2) or synthesis fails (exit 1).
    """
    model = args.model or settings.models[0].name
    engine, load_s = await _start_engine(settings)
    try:
        voice = args.voice or engine.family(model).default_voice
        print(f"loaded model {model} in {load_s:.2f} s", file=sys.stderr)
        request = SpeechRequest(model, text, voice, speed=args.speed, seed=args.seed)
        t0 = time.perf_counter()
        stream = engine.submit(request)
        samples = await _drain(stream, output, progress)
        synth_s = time.perf_counter() - t0
        return SpeakResult(samples, stream.sample_rate, load_s, synth_s)
    except VoxflowError as exc:
        raise CliError(exc.message, exit_code=2 if exc.status < 500 else 1) from None
    finally:
        engine.stop()


def cmd_speak(args: argparse.Namespace) -> int:
    """Synthesize text to a file or stdout and report duration, rate and speed on stderr."""
    text = read_text(args.text, args.file)
    fmt = output_format(args.output, args.fmt)
    check_request(args)
    settings = only_model(load_cli_settings(args, before=SPEAK_DEFAULTS), args.model)
    configure_logging("info" if args.verbose else "warning", tracebacks=args.verbose)
    progress = args.progress if args.progress is not None else sys.stderr.isatty()
    output = AudioOutput(args.output, fmt)
    try:
        result = asyncio.run(synthesize(settings, args, text, output, progress))
        output.finish(result.sample_rate)
    except BaseException:
        output.abort()
        raise
    where = "<stdout>" if args.output == STDOUT else args.output
    print(
        f"wrote {where}: {result.audio_s:.2f} s of audio at {result.sample_rate} Hz "
        f"in {result.synth_s:.2f} s (RTF {result.rtf:.3f})",
        file=sys.stderr,
    )
    return 0


# ---- voices -------------------------------------------------------------------------------------
def load_family(name: str, family: str, options: Any) -> ModelFamily:
    """Load one model family directly (no engine, workers or warm-up).

    Raises:
        CliError: the model fails to load (exit 1).
    """
    try:
        return family_class(family)(name, options)
    except Exception as exc:
        raise CliError(f"model '{name}' failed to load: {exc}", exit_code=1) from None


def voice_rows(settings: Settings) -> list[dict[str, Any]]:
    """One row per voice of every model in `settings`: voice, model, family, language, rate."""
    rows = []
    for spec in settings.models:
        family = load_family(spec.name, spec.family, spec.options)
        for voice in sorted(family.voices.values(), key=lambda v: v.id):
            rows.append({
                "voice": voice.id,
                "model": spec.name,
                "family": voice.family,
                "language": voice.language,
                "sample_rate": voice.sample_rate,
                "default": voice.id == family.default_voice,
            })
    return rows


def format_table(rows: list[dict[str, Any]]) -> str:
    """`voice_rows` as an aligned text table; the default voice of each model is starred."""
    header = ["VOICE", "MODEL", "FAMILY", "LANGUAGE", "SAMPLE_RATE"]
    body = [
        [r["voice"] + (" *" if r["default"] else ""), r["model"], r["family"], r["language"],
         str(r["sample_rate"])]
        for r in rows
    ]
    widths = [max(len(row[i]) for row in [header, *body]) for i in range(len(header))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
             for row in [header, *body]]
    return "\n".join(lines) + "\n* default voice of its model"


def cmd_voices(args: argparse.Namespace) -> int:
    """Print the voices of the configured models (a table, or JSON with ``--json``)."""
    settings = only_model(load_cli_settings(args), args.model)
    configure_logging("info" if args.verbose else "warning", tracebacks=args.verbose)
    rows = voice_rows(settings)
    print(json.dumps(rows, indent=2) if args.json else format_table(rows))
    return 0


# ---- bench and eval -----------------------------------------------------------------------------
def cmd_bench(args: argparse.Namespace) -> int:
    """``voxflow bench run|compare`` (see `voxflow.bench.command`)."""
    from voxflow.bench import command
    from voxflow.bench.errors import BenchError

    handler = command.bench_run if args.bench_command == "run" else command.bench_compare
    try:
        return handler(args)
    except BenchError as exc:
        raise CliError(str(exc), exc.exit_code) from None


def cmd_eval(args: argparse.Namespace) -> int:
    """``voxflow eval wer|speaker`` (see `voxflow.eval.command`)."""
    from voxflow.eval import command

    handler = command.eval_wer if args.eval_command == "wer" else command.eval_speaker
    try:
        return handler(args)
    except ValueError as exc:
        raise CliError(str(exc)) from None


# ---- entry point --------------------------------------------------------------------------------
def _fail(message: str, exit_code: int) -> int:
    print(f"voxflow: {message}", file=sys.stderr)
    return exit_code


def main(argv: Sequence[str] | None = None) -> int:
    """Run one `voxflow` command; returns the exit status (see the module docstring).

    Args:
        argv: arguments without the program name (default: ``sys.argv[1:]``).
    """
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help, --version, or a usage error (already printed)
        return exc.code if isinstance(exc.code, int) else 2
    try:
        return args.handler(args)
    except (CliError, ConfigError) as exc:
        return _fail(str(exc), getattr(exc, "exit_code", 2))
    except KeyboardInterrupt:
        return _fail("interrupted", 130)
