"""`voxflow speak --long`: a long text through the job machinery in process (`voxflow.jobs`):
chapters at Markdown headings, segments stored in a job folder as they finish, a progress bar,
and a rerun with the same output (or ``--job-dir``) resumes where the last run stopped."""

from __future__ import annotations

import argparse
import asyncio
import secrets
import sys
import time
from pathlib import Path

import numpy as np
from tqdm import tqdm

from voxflow.audio.encode import encode_audio
from voxflow.audio.rates import delivered_rate
from voxflow.cli.common import CliError
from voxflow.cli.lexicon import SpeakLexicon
from voxflow.config import Settings
from voxflow.engine.request import SpeechRequest
from voxflow.errors import VoxflowError
from voxflow.jobs.chapters import split_chapters
from voxflow.jobs.runner import Progress, run_job, times_words
from voxflow.jobs.store import JobFiles, write_atomic


def job_dir(args: argparse.Namespace) -> Path:
    """The job folder: ``--job-dir``, else the output's path plus ``.job``.

    Raises:
        CliError: the output is stdout (a job needs a file to resume into).
    """
    if args.job_dir:
        return Path(args.job_dir)
    if args.output == "-":
        raise CliError("--long writes a file: give -o FILE (or --job-dir), not stdout")
    return Path(f"{args.output}.job")


def open_job(root: Path, text: str, options: dict, segment_chars: int) -> JobFiles:
    """The job in `root`: loaded when it holds this text with these options cut into segments
    of about `segment_chars` (a resume), else created (`root` must not exist then).

    Raises:
        CliError: `root` holds another job (other text or options).
    """
    chapters = split_chapters(text, segment_chars)
    if not chapters:
        raise CliError("the text has nothing to read (only whitespace)")
    if (root / "plan.json").is_file():
        job = JobFiles.load(root)
        kept = {k: v for k, v in job.options.items() if k != "seed" or options.get("seed")}
        wanted = {k: v for k, v in options.items() if k != "seed" or options.get("seed")}
        if job.chapters != chapters or kept != wanted:
            raise CliError(f"{root} holds a job of another text or other options: delete it "
                           "or give another --job-dir")
        return job
    if root.exists():
        raise CliError(f"{root} exists and is not a job folder")
    if options.get("seed") is None:
        options = {**options, "seed": secrets.randbits(63)}
    return JobFiles.create(root, options, chapters, time.time())


async def run_long(settings: Settings, args: argparse.Namespace, text: str, fmt: str,
                   progress: bool, lexicon: SpeakLexicon | None = None) -> tuple[float, float]:
    """Synthesize `text` as a job into ``args.output`` (read with `lexicon`, ``--lexicon``'s;
    None: the configured default); returns (audio seconds, synthesis seconds). The job folder
    is removed once the file is written.

    Raises:
        CliError: bad text or options (exit 2), a failed segment (exit 1).
    """
    from voxflow.cli.speak import _start_engine  # noqa: PLC0415 (speak imports this module)

    model = settings.models[0].name
    engine, load_s = await _start_engine(settings)
    try:
        if lexicon is not None:
            lexicon.install(engine)
        sample = engine.resolve(SpeechRequest(
            model, text[:200], args.voice or engine.family(model).default_voice, args.speed,
            args.seed, language=args.language,
            lexicon=None if lexicon is None else lexicon.name))
        engine.prepare(sample)  # as POST /v1/audio/jobs: bad options (a lexicon's) fail here
        model, voice = sample.model, sample.voice  # aliases resolved
        options = {"timestamps": times_words(engine, sample), "model": model,
                   "voice": voice, "speed": args.speed, "seed": args.seed,
                   "language": args.language, "instructions": None,
                   "response_format": fmt, "sample_rate": args.sample_rate}
        if lexicon is not None:  # its version too: a changed lexicon is another job
            options |= {"lexicon": lexicon.name, "lexicon_version": lexicon.version}
        job = open_job(job_dir(args), text, options, settings.jobs.segment_chars)
        if job.done:
            print(f"resuming: {len(job.done)} segments already done", file=sys.stderr)
        t0 = time.perf_counter()
        with tqdm(total=job.total_chars, initial=job.done_chars, unit="char",
                  desc="synthesizing", file=sys.stderr, disable=not progress,
                  dynamic_ncols=True, leave=False) as bar:
            def advance() -> None:
                bar.update(job.done_chars - bar.n)

            await run_job(engine, job, Progress(), on_segment=advance)
        synth_s = time.perf_counter() - t0
        if job.state != "done":
            message = (job.error or {}).get("error", {}).get("message", job.state)
            raise CliError(f"the job failed: {message} (rerun to resume)", exit_code=1)
        rate = job.sample_rate or 0
        audio = np.concatenate([job.read_chapter(c) for c in range(len(job.chapters))])
        out_rate = delivered_rate(fmt, rate, args.sample_rate)
        data = await asyncio.to_thread(encode_audio, audio, rate, fmt, out_rate)
        write_atomic(Path(args.output), data)
        job.remove()
        return len(audio) / rate if rate else 0.0, synth_s
    except VoxflowError as exc:
        raise CliError(exc.message, exit_code=2 if exc.status < 500 else 1) from None
    finally:
        engine.stop()
