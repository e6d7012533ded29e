"""`voxflow speak`: synthesize text in process, without a server, to a file or stdout."""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np
from tqdm import tqdm

from voxflow.audio.encode import encode_audio
from voxflow.audio.formats import FORMATS, check_format
from voxflow.audio.stream import StreamEncoder
from voxflow.cli.common import CliError, load_cli_settings, only_model
from voxflow.config import Settings
from voxflow.engine.engine import SPEED_MAX, SPEED_MIN, Engine
from voxflow.engine.request import SpeechRequest
from voxflow.engine.stream import SpeechStream
from voxflow.errors import VoxflowError
from voxflow.logging_setup import configure_logging

log = logging.getLogger(__name__)


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


def add_speak(commands, common: argparse.ArgumentParser) -> None:
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
