"""`voxflow speak`: synthesize text in process, without a server, to a file or stdout."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np
from tqdm import tqdm

from voxflow.audio.encode import encode_audio, wav_with_comment
from voxflow.audio.formats import FORMATS, check_format
from voxflow.audio.rates import NATIVE, RequestedRate, check_requested_rate, delivered_rate
from voxflow.audio.resample import resample
from voxflow.audio.stream import StreamEncoder
from voxflow.cli.common import CliError, load_cli_settings, only_model
from voxflow.cli.lexicon import SpeakLexicon, speak_lexicon
from voxflow.config import Settings
from voxflow.engine.checks import check_seed, check_speed
from voxflow.engine.engine import Engine
from voxflow.engine.request import SpeechRequest
from voxflow.engine.stream import SpeechStream
from voxflow.errors import InvalidRequestError, VoxflowError
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
        description="Synthesize TEXT (or the contents of -f FILE, or text piped on stdin) in "
        "process and write audio.",
    )
    p.add_argument(
        "text", nargs="*", metavar="TEXT",
        help="text to speak; several words are joined with spaces (quotes optional); "
        "without TEXT or -f, text piped on stdin is read",
    )
    p.add_argument("-f", "--file", metavar="FILE", help="read the text from FILE (- = stdin)")
    p.add_argument(
        "-o", "--output", required=True, metavar="OUT",
        help="output file; its suffix gives the format (.wav, .mp3, ...); - = stdout",
    )
    p.add_argument("--model", help="served model name (default: the first in the config)")
    p.add_argument("--voice", help="voice id (default: the model's default voice)")
    p.add_argument(
        "--format", dest="fmt", metavar="FORMAT",
        help=f"audio format: {', '.join(FORMATS)} (default: from OUT's suffix; must agree "
        "with a known suffix)",
    )
    p.add_argument("--speed", type=float, default=1.0, help="speaking rate, 0.25 to 4 (1)")
    p.add_argument(
        "--sample-rate", metavar="HZ", type=_rate_arg,
        help="rate of the file, 8000 to 48000 Hz (one the format takes) or 'native' (the "
        "voice's own); default: 24000 for pcm (as OpenAI's), the voice's own otherwise",
    )
    p.add_argument(
        "--language", metavar="TAG",
        help="language the text is read in (en, en-GB, ja; as the API's `language`; default: "
        "decided from the text among the voice's languages)",
    )
    p.add_argument("--seed", type=int, help="seed for reproducible audio (same bytes every run)")
    p.add_argument(
        "--lexicon", metavar="NAME_OR_FILE",
        help="pronunciation lexicon, as the API's `lexicon`: a saved one's name (from "
        "server.lexicons_dir) or a lexicon file (.json entries or a .pls PLS file); '' for "
        "none (default: the voice's or model's configured lexicon, if any)",
    )
    p.add_argument(
        "--progress", action=argparse.BooleanOptionalAction, default=None,
        help="show a progress bar on stderr (default: when stderr is a terminal)",
    )
    p.add_argument(
        "--long", action="store_true",
        help="a long text (a book): chapters at Markdown headings, made segment by segment "
        "into a job folder (OUT.job), so a rerun resumes where the last run stopped",
    )
    p.add_argument("--job-dir", metavar="DIR", help="the --long job's folder (default: OUT.job)")
    p.add_argument("-v", "--verbose", action="store_true", help="log engine details to stderr")
    p.set_defaults(handler=cmd_speak)


@dataclass(frozen=True)
class SpeakResult:
    """What `speak` did: samples written, their rate, and the timings."""

    samples: int
    sample_rate: int
    load_s: float
    synth_s: float
    note: str | None = None  # the model's `random_weights_note`: its audio is noise
    unspeakable: bool = False  # the text had nothing speakable: the audio is a short silence

    @property
    def audio_s(self) -> float:
        return self.samples / self.sample_rate

    @property
    def rtf(self) -> float:
        """Synthesis wall seconds (model load excluded) per second of audio."""
        return self.synth_s / self.audio_s if self.audio_s > 0 else float("inf")


def read_text(text: str | list[str] | None, file: str | None) -> str:
    """The text to speak; never empty.

    From the TEXT words (joined with single spaces), else the file (``-`` = stdin), else
    stdin when it is not a terminal (``echo hi | voxflow speak -o x.wav``).

    Raises:
        CliError: both TEXT and -f, nothing to read (no TEXT, no -f, stdin a terminal), an
            unreadable file, or only whitespace.
    """
    if isinstance(text, list):
        text = " ".join(text) if text else None
    if text is not None and file is not None:
        raise CliError("give the text to speak or -f FILE, not both")
    if file is None and text is None:
        if sys.stdin is None or sys.stdin.isatty():
            raise CliError("give the text to speak, -f FILE, or pipe text on stdin")
        file = STDOUT  # "-": read stdin
    if file is not None:
        try:
            text = sys.stdin.read() if file == STDOUT else Path(file).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            reason = getattr(exc, "strerror", None) or str(exc)
            raise CliError(f"cannot read {'stdin' if file == STDOUT else file}: {reason}") from None
    assert text is not None
    if not text.strip():
        where = "stdin" if file == STDOUT else file
        if file is None:
            raise CliError("the text to speak is empty")
        raise CliError(f"{where} has no text to speak (give TEXT or -f FILE)")
    return text


def output_format(output: str, fmt: str | None) -> str:
    """The audio format: from the output file's suffix, or ``--format``; both must agree.

    ``-o b.wav --format mp3`` is refused rather than writing MP3 into a ``.wav``; ``--format``
    alone names the format of stdout or of a file without a known suffix.

    Raises:
        CliError: unknown format, ``--format`` contradicting the suffix, or no ``--format``
            with stdout or an unknown suffix.
    """
    suffix = Path(output).suffix.lower() if output != STDOUT else ""
    if fmt is not None:
        try:
            chosen = check_format(fmt.lower())
        except ValueError as exc:
            raise CliError(str(exc)) from None
        implied = SUFFIX_FORMATS.get(suffix)
        if implied is not None and implied != chosen:
            raise CliError(
                f"--format {chosen} contradicts the suffix of {output} ({implied}); drop "
                f"--format or name the file with a .{chosen} suffix"
            )
        return chosen
    if output == STDOUT:
        raise CliError(f"writing to stdout needs --format ({', '.join(FORMATS)})")
    if suffix not in SUFFIX_FORMATS:
        known = ", ".join(SUFFIX_FORMATS)
        raise CliError(
            f"cannot tell the audio format of '{output}' (known suffixes: {known}); "
            "pass --format"
        )
    return SUFFIX_FORMATS[suffix]


def check_output(output: str) -> None:
    """Make sure `output` can be written, before any model is loaded.

    The path must not be a directory and its folder must exist; a new file is created and
    removed again (so ``/proc/x.wav`` or a read-only folder fails here, not after the whole
    synthesis), an existing one opened for appending (its bytes untouched).

    Raises:
        CliError: a directory, a missing folder, or a file that cannot be created or written.
    """
    if output == STDOUT:
        return
    path = Path(output)
    if path.is_dir():
        raise CliError(f"cannot write {output}: it is a directory; give a file name")
    folder = path.parent
    if not folder.is_dir():
        raise CliError(f"cannot write {output}: folder {folder} does not exist")
    try:
        if path.exists():
            with open(path, "ab"):
                pass
        else:
            os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))
            path.unlink()
    except OSError as exc:
        raise CliError(f"cannot write {output}: {exc.strerror or exc}") from None


def _rate_arg(value: str) -> int | str:
    """``--sample-rate``: an int (Hz) or ``native``; checked against the format later."""
    if value == NATIVE:
        return value
    try:
        return int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{value!r} is not a rate in Hz (an integer) or '{NATIVE}'"
        ) from None


def check_request(args: argparse.Namespace, fmt: str) -> None:
    """Reject a bad speed, seed or sample rate for `fmt` before any model is loaded.

    Raises:
        CliError: speed out of range, seed outside 0..2**63-1, a rate `fmt` cannot be
            written at (`voxflow.audio.rates.check_requested_rate`).
    """
    try:  # the engine's own checks (voxflow.engine.checks), before the model loads
        check_speed(args.speed)
        check_seed(args.seed)
    except InvalidRequestError as exc:
        raise CliError(f"--{exc.param}: {exc.message}") from None
    try:
        check_requested_rate(fmt, getattr(args, "sample_rate", None))
    except ValueError as exc:
        raise CliError(f"--sample-rate: {exc}") from None


class AudioOutput:
    """Where `speak` writes: a file or stdout.

    Stdout and ``pcm`` files get bytes as chunks arrive (`StreamEncoder`; a streamed ``wav``
    has unknown-length sizes). Other files are encoded whole at the end with `encode_audio`,
    so their headers are exact (wav sizes, FLAC STREAMINFO, mp3 gapless info); a failed run
    leaves no file behind.
    """

    def __init__(self, target: str, fmt: str, rate: RequestedRate = None):
        """Write `fmt` to `target` (a path or ``-``) at the rate `rate` asks for (checked
        already; `voxflow.audio.rates.delivered_rate` gives the file's)."""
        self.target, self.fmt, self.rate = target, fmt, rate
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
            self._encoder = StreamEncoder(self.fmt, sample_rate, self.file_rate(sample_rate))
            self._file = sys.stdout.buffer if self.target == STDOUT else self._open()
        self._emit(self._encoder.push(samples))

    def _open(self) -> BinaryIO:
        try:
            return open(self.target, "wb")
        except OSError as exc:
            raise CliError(f"cannot write {self.target}: {exc.strerror or exc}", 1) from None

    def finish(self, sample_rate: int, comment: str | None = None) -> None:
        """Complete the output (flush the stream, or encode and write the whole file); a
        whole WAV file gets `comment` as its LIST/INFO comment (ICMT)."""
        if not self.streaming:
            audio = np.concatenate(self._parts) if self._parts else np.zeros(0, np.float32)
            out = self.file_rate(sample_rate)
            if comment is not None and self.fmt == "wav":
                data = wav_with_comment(resample(audio, sample_rate, out), out, comment)
            else:
                data = encode_audio(audio, sample_rate, self.fmt, out)
            try:
                Path(self.target).write_bytes(data)
            except OSError as exc:
                raise CliError(f"cannot write {self.target}: {exc.strerror or exc}", 1) from None
            return
        if self._encoder is None:  # no chunk at all: still write a valid (empty) stream
            self.write(np.zeros(0, np.float32), sample_rate)
        assert self._encoder is not None
        self._emit(self._encoder.finish())
        self._close_file()

    def file_rate(self, sample_rate: int) -> int:
        """The rate (Hz) of the file written for audio at `sample_rate` Hz."""
        return delivered_rate(self.fmt, sample_rate, self.rate)

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
    """Write every chunk of `stream` to `output`; returns the number of samples.

    The bar counts segments delivered; its audio seconds are set before each count so a drawn
    state is never a segment behind, and the last state (every segment, all the audio) is
    drawn before the bar closes, so it ends where the summary line does.
    """
    samples = 0
    with _progress_bar(show_progress) as bar:
        async with stream:
            async for chunk in stream:
                output.write(chunk.samples, chunk.sample_rate)
                samples += int(chunk.samples.size)
                total = stream.state.segments_total
                if bar.total is None and total is not None:
                    bar.total = total
                bar.set_postfix_str(f"{samples / chunk.sample_rate:.1f} s audio", refresh=False)
                if chunk.samples.size:
                    bar.update(1)
                if chunk.is_last:
                    bar.n = bar.total if bar.total is not None else bar.n
                    bar.refresh()
    return samples


async def _start_engine(settings: Settings) -> tuple[Engine, float]:
    """Load the models (no warm-up unless configured); returns the engine and load seconds."""
    engine = Engine(settings, limit_input=False)  # a file of any length, segment by segment
    t0 = time.perf_counter()
    try:
        await engine.start()
    except Exception as exc:
        engine.stop()
        name = next((m.name for m in engine.models.values() if m.status == "failed"), "?")
        raise CliError(f"model '{name}' failed to load: {exc}", exit_code=1) from None
    return engine, time.perf_counter() - t0


async def synthesize(
    settings: Settings, args: argparse.Namespace, text: str, output: AudioOutput, progress: bool,
    lexicon: SpeakLexicon | None = None,
) -> SpeakResult:
    """Start an engine for `settings`, synthesize `text` into `output` (read with `lexicon`,
    ``--lexicon``'s; None: the configured default), stop the engine.

    Raises:
        CliError: a model fails to load (exit 1), the request is rejected (unknown voice,
            nothing speakable: exit 2) or synthesis fails (exit 1).
    """
    model = settings.models[0].name  # only_model kept just --model's (an alias names it too)
    engine, load_s = await _start_engine(settings)
    try:
        if lexicon is not None:
            lexicon.install(engine)
        voice = args.voice or engine.family(model).default_voice
        print(f"loaded model {model} in {load_s:.2f} s", file=sys.stderr)
        request = SpeechRequest(
            model, text, voice, speed=args.speed, seed=args.seed,
            language=getattr(args, "language", None),
            lexicon=None if lexicon is None else lexicon.name,
            streamed=output.streaming,  # a whole file needs no audio early
        )
        t0 = time.perf_counter()
        stream = engine.submit(request)
        samples = await _drain(stream, output, progress)
        synth_s = time.perf_counter() - t0
        note = engine.family(model).random_weights_note()
        return SpeakResult(samples, stream.sample_rate, load_s, synth_s, note,
                           stream.state.unspeakable)
    except VoxflowError as exc:
        raise CliError(exc.message, exit_code=2 if exc.status < 500 else 1) from None
    finally:
        engine.stop()


def cmd_speak(args: argparse.Namespace) -> int:
    """Synthesize text to a file or stdout and report duration, rate and speed on stderr."""
    check_output(args.output)  # the output path first: `-o some_directory` says so
    fmt = output_format(args.output, args.fmt)
    check_request(args, fmt)
    text = read_text(args.text, args.file)
    settings = only_model(load_cli_settings(args, before=SPEAK_DEFAULTS), args.model)
    lexicon = speak_lexicon(getattr(args, "lexicon", None), settings)  # before the model loads
    configure_logging("info" if args.verbose else "warning", tracebacks=args.verbose)
    progress = args.progress if args.progress is not None else sys.stderr.isatty()
    if getattr(args, "long", False):
        return _speak_long(settings, args, text, fmt, progress, lexicon)
    output = AudioOutput(args.output, fmt, getattr(args, "sample_rate", None))
    try:
        result = asyncio.run(synthesize(settings, args, text, output, progress, lexicon))
        output.finish(result.sample_rate, result.note)
    except BaseException:
        output.abort()
        raise
    where = "<stdout>" if args.output == STDOUT else args.output
    print(
        f"wrote {where}: {result.audio_s:.2f} s of audio at "
        f"{output.file_rate(result.sample_rate)} Hz "
        f"in {result.synth_s:.2f} s (RTF {result.rtf:.3f})",
        file=sys.stderr,
    )
    if result.note is not None:
        print(f"note: the weights are {result.note}", file=sys.stderr)
    if result.unspeakable:
        print("note: the text has nothing speakable (only punctuation or symbols): the audio "
              "is silence", file=sys.stderr)
    return 0


def _speak_long(settings: Settings, args: argparse.Namespace, text: str, fmt: str,
                progress: bool, lexicon: SpeakLexicon | None) -> int:
    """`speak --long` (`voxflow.cli.speak_long`)."""
    from voxflow.cli.speak_long import run_long  # noqa: PLC0415 (only --long needs it)

    audio_s, synth_s = asyncio.run(run_long(settings, args, text, fmt, progress, lexicon))
    print(f"wrote {args.output}: {audio_s:.2f} s of audio in {synth_s:.2f} s", file=sys.stderr)
    return 0
