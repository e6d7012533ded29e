"""How faithfully each family honours `speed` over OpenAI's range (0.25-4), and how it sounds.

For each family (Piper voice joe, Kokoro voice jm_kumo) and each speed, the first few sentences
of benchmarks/data/sentences.txt are synthesized in process (one request each, fixed seed, no
server) and their total duration compared with the speed-1.0 total: ``effective`` is
``duration(1.0) / duration(s)``, the speed actually delivered, and ``error`` is
``effective / s - 1`` (0 is exact); ``worst`` is the same error for the one sentence furthest
from exact. With ``--wer``, Whisper tiny.en transcribes every clip and
the word error rate over those sentences is printed per speed.

Two modes:
- ``native``: the model's own length scale over the whole range (each family's
  ``native_speed_min`` / ``native_speed_max`` widened to 0.25 / 4, so nothing is stretched);
- ``served``: the deployment's settings as configured (native inside the clean range, Rubber
  Band time stretch outside it, see docs/api.md "Speed").

Run from the repository root:

    .venv/bin/python benchmarks/speed_range.py --mode native --wer
    .venv/bin/python benchmarks/speed_range.py --mode served --wer
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from voxflow.config import load_settings, parse_override  # noqa: E402
from voxflow.engine.engine import Engine  # noqa: E402
from voxflow.engine.request import SpeechRequest  # noqa: E402

SPEEDS = [0.25, 0.35, 0.5, 0.75, 1.0, 1.5, 2.0, 2.5, 3.0, 4.0]
VOICES = {"piper": "joe", "kokoro": "jm_kumo"}
SENTENCES = ROOT / "benchmarks" / "data" / "sentences.txt"
CONFIG = ROOT / "configs" / "multi.yaml"


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--mode", choices=["native", "served"], default="served")
    p.add_argument("--models", default="piper,kokoro", help="comma-separated (piper,kokoro)")
    p.add_argument("--sentences", type=int, default=4, help="first N sentences (4)")
    p.add_argument("--speeds", default=",".join(map(str, SPEEDS)))
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--wer", action="store_true", help="also transcribe (Whisper tiny.en)")
    p.add_argument("--set", dest="overrides", action="append", default=[],
                   metavar="KEY=VALUE", help="extra setting overrides, as `voxflow --set`")
    return p.parse_args()


def overrides(args: argparse.Namespace) -> dict:
    out: dict = {"engine.warmup": False, "engine.request_timeout_s": 3600.0}
    if args.mode == "native":
        for i in range(2):
            out[f"models.{i}.options.native_speed_min"] = 0.25
            out[f"models.{i}.options.native_speed_max"] = 4.0
    out.update(parse_override(kv) for kv in args.overrides)
    return out


async def synthesize(engine: Engine, model: str, text: str, speed: float, seed: int):
    request = SpeechRequest(model, text, VOICES[model], speed=speed, seed=seed)
    stream = engine.submit(request)
    chunks = await stream.collect()
    audio = np.concatenate([c.samples for c in chunks]) if chunks else np.zeros(0, np.float32)
    return audio, stream.sample_rate


async def measure(args: argparse.Namespace, sentences: list[str], speeds: list[float]) -> dict:
    settings = load_settings(str(CONFIG), overrides(args))
    engine = Engine(settings)
    await engine.start()
    clips: dict = {}
    try:
        for model in args.models.split(","):
            for speed in speeds:
                t0 = time.perf_counter()
                clips[model, speed] = [
                    await synthesize(engine, model, s, speed, args.seed) for s in sentences
                ]
                audio_s = sum(a.size / sr for a, sr in clips[model, speed])
                print(f"  {model} speed {speed}: {audio_s:.2f} s audio in "
                      f"{time.perf_counter() - t0:.2f} s", file=sys.stderr)
    finally:
        engine.stop()
    return clips


def word_error_rate(clips, sentences, transcribe) -> float:
    import jiwer

    from voxflow.eval.normalize import normalize_for_wer

    refs = [normalize_for_wer(s) for s in sentences]
    hyps = [normalize_for_wer(transcribe(audio, sr)) for audio, sr in clips]
    return jiwer.wer(refs, hyps)


def main() -> None:
    args = parse_args()
    speeds = [float(s) for s in args.speeds.split(",")]
    if 1.0 not in speeds:
        speeds.append(1.0)
    lines = SENTENCES.read_text(encoding="utf-8").splitlines()
    sentences = [s.strip() for s in lines if s.strip()][: args.sentences]
    clips = asyncio.run(measure(args, sentences, speeds))
    transcribe = None
    if args.wer:
        from voxflow.eval.asr import WhisperTranscriber

        transcribe = WhisperTranscriber()
    print(f"mode {args.mode}, seed {args.seed}, {len(sentences)} sentences, one request each")
    print(f"{'model':<8}{'speed':>7}{'dur s':>9}{'ideal s':>9}{'effective':>11}{'error':>8}"
          f"{'worst':>8}" + (f"{'WER':>7}" if transcribe else ""))
    for model in args.models.split(","):
        base = sum(a.size / sr for a, sr in clips[model, 1.0])
        for speed in speeds:
            dur = sum(a.size / sr for a, sr in clips[model, speed])
            effective = base / dur
            # The sentence whose own effective speed is furthest from the asked one.
            pairs = zip(clips[model, 1.0], clips[model, speed], strict=True)
            errors = [a1.size / a.size / speed - 1 for (a1, _), (a, _) in pairs]
            worst = max(errors, key=abs)
            row = (f"{model:<8}{speed:>7.2f}{dur:>9.2f}{base / speed:>9.2f}"
                   f"{effective:>11.3f}{effective / speed - 1:>+8.1%}{worst:>+8.1%}")
            if transcribe:
                row += f"{word_error_rate(clips[model, speed], sentences, transcribe):>7.1%}"
            print(row, flush=True)


if __name__ == "__main__":
    main()
