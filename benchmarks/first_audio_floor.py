"""The compute floor of time to first audio: the engine in this process, no HTTP.

Run from the repository root (about a minute with the default voice):

    .venv/bin/python benchmarks/first_audio_floor.py [--config configs/piper.yaml]
        [--texts benchmarks/data/sentences.txt] [--repeats 3] [--json floor.json]

For each text (one request per line, sent one at a time, unseeded as `voxflow bench run` sends
them), the seconds from `Engine.submit` to the first audio chunk and to the last: front end,
acoustic model and the first decoder window, exactly the code a server runs, but without the
HTTP server, the client, the socket and the audio encoder. The median over texts and repeats of
the first is the floor a lone request's TTFA over HTTP is compared with (issue 13: TTFA p50 at
concurrency 1 at most 20 ms above it). Prints one line per statistic; `--json` writes them with
every sample.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from voxflow.config import load_settings  # noqa: E402
from voxflow.engine.engine import Engine  # noqa: E402
from voxflow.engine.request import SpeechRequest  # noqa: E402


async def measure(config: Path, texts: list[str], repeats: int,
                  model: str | None) -> dict[str, object]:
    """Per request (texts x repeats, in order): seconds to the first chunk, to the last, and
    audio seconds. The engine is started (with its warm-up) before the first request."""
    settings = load_settings(config, {})
    engine = Engine(settings)
    await engine.start()
    try:
        name = model or settings.models[0].name
        voice = engine.models[name].family.default_voice
        first, last, audio = [], [], []
        for _ in range(repeats):
            for text in texts:
                t0 = time.perf_counter()
                t_first, samples, rate = None, 0, 1
                async for chunk in engine.submit(SpeechRequest(name, text, voice)):
                    if t_first is None and chunk.samples.size:
                        t_first = time.perf_counter()
                    samples += chunk.samples.size
                    rate = chunk.sample_rate
                t_end = time.perf_counter()
                first.append((t_first or t_end) - t0)
                last.append(t_end - t0)
                audio.append(samples / rate)
        return {"model": name, "voice": voice, "requests": len(first), "first_s": first,
                "last_s": last, "audio_s": audio}
    finally:
        engine.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", type=Path, default=ROOT / "configs" / "piper.yaml")
    parser.add_argument("--model", default=None, help="served model name (default: the first)")
    parser.add_argument("--texts", type=Path, default=ROOT / "benchmarks" / "data" /
                        "sentences.txt")
    parser.add_argument("--limit", type=int, default=None, help="first N texts only")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    texts = [t.strip() for t in args.texts.read_text(encoding="utf-8").splitlines() if t.strip()]
    texts = texts[: args.limit] if args.limit else texts
    result = asyncio.run(measure(args.config, texts, args.repeats, args.model))
    first, last, audio = result["first_s"], result["last_s"], result["audio_s"]
    assert isinstance(first, list) and isinstance(last, list) and isinstance(audio, list)
    result["first_p50_s"] = statistics.median(first)
    result["last_p50_s"] = statistics.median(last)
    result["rtf_p50"] = statistics.median(e / a for e, a in zip(last, audio, strict=True))
    print(f"{result['model']} voice {result['voice']}: {result['requests']} requests, one at "
          f"a time, in process")
    print(f"first audio p50 {result['first_p50_s'] * 1000:.1f} ms "
          f"(min {min(first) * 1000:.1f}, max {max(first) * 1000:.1f})")
    print(f"whole request p50 {result['last_p50_s'] * 1000:.1f} ms, RTF p50 "
          f"{result['rtf_p50']:.3f}")
    if args.json:
        args.json.write_text(json.dumps(result, indent=1), encoding="utf-8")


if __name__ == "__main__":
    main()
