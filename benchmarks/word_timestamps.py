"""How close voxflow's word timestamps are to Whisper's word timestamps (issue 14 item 3).

Each sentence of benchmarks/data/sentences.txt is synthesized in process (Piper's voice joe by
default, or `--model kokoro --voice jm_kumo` from configs/multi.yaml; one request each, fixed
seed, ``timestamps`` on, no server); Whisper tiny.en transcribes the clip
with word timestamps, and the words equal on both sides are compared
(`voxflow.eval.word_timing`). Prints the median and p90 absolute boundary error (starts and
ends together) in ms, and writes every word's pair of times to a JSON.

Run from the repository root:

    .venv/bin/python benchmarks/word_timestamps.py --out /tmp/word_timestamps.json
    .venv/bin/python benchmarks/word_timestamps.py --model kokoro --voice jm_kumo \
        --out /tmp/word_timestamps_kokoro.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from voxflow.config import load_settings  # noqa: E402
from voxflow.engine.engine import Engine  # noqa: E402
from voxflow.engine.request import SpeechRequest  # noqa: E402
from voxflow.eval.word_timing import boundary_errors, whisper_words  # noqa: E402

SENTENCES = ROOT / "benchmarks" / "data" / "sentences.txt"


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sentences", type=int, default=0, help="first N sentences (0: all)")
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--speed", type=float, default=1.0)
    p.add_argument("--model", default="piper", help="piper or kokoro")
    p.add_argument("--voice", default=None, help="default: joe (piper), jm_kumo (kokoro)")
    p.add_argument("--out", type=Path, default=Path("word_timestamps.json"))
    return p.parse_args()


async def synthesize(sentences: list[str], seed: int, speed: float, model: str,
                     voice: str) -> list[tuple]:
    """Per sentence: (audio, sample rate, [(word, start, end)])."""
    config = ROOT / "configs" / "multi.yaml" if model == "kokoro" else None
    settings = load_settings(config, {"engine.warmup": False,
                                      "engine.request_timeout_s": 3600.0})
    engine = Engine(settings)
    await engine.start()
    out = []
    try:
        for text in sentences:
            request = SpeechRequest(model, text, voice, speed=speed, seed=seed,
                                    timestamps=True)
            stream = engine.submit(request)
            chunks = await stream.collect()
            audio = np.concatenate([c.samples for c in chunks])
            words = [(text[w.text_start : w.text_end], w.start, w.end)
                     for c in chunks for w in c.words]
            out.append((audio, stream.sample_rate, words))
    finally:
        engine.stop()
    return out


def main() -> None:
    args = parse_args()
    lines = [s.strip() for s in SENTENCES.read_text(encoding="utf-8").splitlines() if s.strip()]
    sentences = lines[: args.sentences] if args.sentences else lines
    voice = args.voice or {"piper": "joe", "kokoro": "jm_kumo"}[args.model]
    clips = asyncio.run(synthesize(sentences, args.seed, args.speed, args.model, voice))
    from voxflow.eval.asr import WhisperTranscriber

    model = WhisperTranscriber().model
    errors: list[float] = []
    report = []
    for text, (audio, rate, ours) in zip(sentences, clips, strict=True):
        theirs = whisper_words(model, audio, rate)
        errors.extend(boundary_errors(ours, theirs))
        report.append({"text": text, "ours": ours, "whisper": theirs})
    ms = np.asarray(errors) * 1000
    median, p90 = float(np.median(ms)), float(np.percentile(ms, 90))
    starts, ends = float(np.median(ms[0::2])), float(np.median(ms[1::2]))
    words = sum(len(r["ours"]) for r in report)
    print(f"{len(sentences)} sentences, {words} words, {len(ms) // 2} matched with Whisper: "
          f"boundary error median {median:.0f} ms, p90 {p90:.0f} ms (starts {starts:.0f}, "
          f"ends {ends:.0f}; {args.model}/{voice}, speed {args.speed})")
    args.out.write_text(json.dumps({"median_ms": median, "p90_ms": p90,
                                    "median_start_ms": starts, "median_end_ms": ends,
                                    "matched_words": len(ms) // 2, "sentences": report},
                                   indent=1))


if __name__ == "__main__":
    main()
