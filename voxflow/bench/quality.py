"""``bench compare --quality``: is each arm's audio right, beside how fast it came?

During each arm's first server start, after its timed sweep, every text of the quality case is
synthesized once, one request at a time (not timed), and saved as ``NNN.wav`` (text index) in
that arm's folder. After all runs:
- word error rate of each arm's clips (`voxflow.eval.wer`, Whisper tiny.en, normalized);
- speaker similarity of each clip to the reference, mean and min per arm. The reference is
  ``--ref`` when given, else the centroid of the first (base) arm's clips: the base's own score
  is then its spread around its own voice, and another arm scoring the same means it sounds
  like the same speaker;
- clip by clip identity of every pair of arms (identical, different length, or SNR).
"""

from __future__ import annotations

from itertools import combinations
from pathlib import Path
from typing import Any

from voxflow.bench.adapters import Adapter
from voxflow.bench.client import fetch
from voxflow.bench.errors import BenchError
from voxflow.bench.report import render_table
from voxflow.bench.runner import Case, SweepPlan, http_client
from voxflow.eval.clips import write_clip


async def synthesize_clips(adapter: Adapter, case: Case, folder: Path, plan: SweepPlan) -> None:
    """Speak every text of `case` once, in turn, into ``folder/NNN.wav``.

    Raises:
        BenchError: a request failed.
    """
    folder.mkdir(parents=True, exist_ok=True)
    async with http_client(1) as client:
        for t, text in enumerate(case.texts):
            seed = None if plan.seed is None else plan.seed + t
            result = await fetch(client, adapter, text, t, seed, plan.timeout_s, keep_audio=True)
            if not result.timeline.ok or result.audio is None:
                raise BenchError(f"quality clip {t} failed: {result.timeline.error}")
            write_clip(folder / f"{t:03d}.wav", result.audio, result.timeline.sample_rate)


def quality_report(folders: dict[str, Path], case: Case, ref: Path | None) -> dict[str, Any]:
    """Word error rate, speaker similarity and pairwise identity of each arm's clips.

    Args:
        folders: arm name -> folder of its clips; the first arm is the base.
    """
    from voxflow.eval.asr import WhisperTranscriber
    from voxflow.eval.identity import compare_folders
    from voxflow.eval.speaker import SpeakerEncoder, centroid, embed_folder, similarity_to
    from voxflow.eval.wer import evaluate_dir

    transcribe = WhisperTranscriber()
    wer = {name: evaluate_dir(folder, list(case.texts), transcribe)
           for name, folder in folders.items()}
    encoder = SpeakerEncoder()
    embeddings = {name: embed_folder(encoder, folder) for name, folder in folders.items()}
    base = next(iter(folders))
    reference = (encoder.embed_file(ref) if ref is not None
                 else centroid(list(embeddings[base].values())))
    similarity = {name: similarity_to(reference, name, e) for name, e in embeddings.items()}
    pairs = [compare_folders(a, folders[a], b, folders[b]) for a, b in combinations(folders, 2)]
    return {
        "case": case.name,
        "reference": str(ref) if ref is not None else f"centroid of {base}'s clips",
        "wer": {name: r.to_dict() for name, r in wer.items()},
        "speaker_similarity": {name: s.to_dict() for name, s in similarity.items()},
        "identity": [p.to_dict() for p in pairs],
        "table": quality_table(wer, similarity, pairs),
    }


def quality_table(wer, similarity, pairs) -> str:
    header = ["arm", "clips", "WER", "errors/words", "similarity mean", "similarity min"]
    rows = [[name, str(len(r.clips)), f"{r.wer:.4f}", f"{r.errors}/{r.words}",
             f"{similarity[name].mean:.3f}", f"{similarity[name].min:.3f}"]
            for name, r in wer.items()]
    return "\n".join([render_table(header, rows), *[p.summary() for p in pairs]])
