"""`voxflow eval wer` and `voxflow eval speaker` on real joe audio from the real server.

The clips are made once per module through the bench's own client (4 in flight). `eval wer`
reuses the session's Whisper model instead of loading its own.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import data_file

from voxflow.bench.adapters import Target, make_adapter
from voxflow.bench.runner import Case, SweepPlan, http_client, run_level
from voxflow.cli import main
from voxflow.eval.clips import load_clip, write_clip

pytestmark = pytest.mark.integration

ESPEAK_VOICE = Path(__file__).with_name("espeak_voice.py")
SEED = 7


def speak_all(url: str, texts: list[str], folder: Path, concurrency: int = 4) -> Path:
    """Speak `texts` through the server into folder/NNN.wav (seed SEED + index)."""
    folder.mkdir(parents=True, exist_ok=True)
    adapter = make_adapter(Target("openai", url, stream=False))
    case = Case("texts", tuple(texts))

    async def run():
        async with http_client(concurrency) as client:
            return await run_level(client, adapter, case, concurrency, len(texts),
                                   SweepPlan((concurrency,), seed=SEED), keep_audio=True)

    for i, result in asyncio.run(run()):
        assert result.timeline.ok, result.timeline.error
        write_clip(folder / f"{i:03d}.wav", result.audio, result.timeline.sample_rate)
    return folder


CLIPS = 8
"""Lines of sentences.txt spoken for these tests (the time "6:45" among them): the whole file's
word error rate is tests/integration/test_quality.py's."""


@pytest.fixture(scope="module")
def sentences() -> list[str]:
    return list(Case.from_file(data_file("sentences.txt")).texts[:CLIPS])


@pytest.fixture(scope="module")
def sentences_file(sentences, tmp_path_factory) -> Path:
    """The lines spoken, one per line, as `voxflow eval wer --sentences` reads them."""
    path = tmp_path_factory.mktemp("texts") / "sentences.txt"
    path.write_text("\n".join(sentences) + "\n", encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def joe_clips(joe_server, sentences, tmp_path_factory) -> Path:
    """The first CLIPS lines of sentences.txt spoken by joe, as 000.wav .. 007.wav."""
    return speak_all(joe_server.url, sentences, tmp_path_factory.mktemp("joe"))


@pytest.fixture
def reuse_whisper(monkeypatch, transcribe):
    monkeypatch.setattr("voxflow.eval.asr.WhisperTranscriber", lambda cpu_threads=2: transcribe)


def test_eval_wer_on_voxflow_audio(joe_clips, sentences_file, reuse_whisper, tmp_path, capsys):
    out = tmp_path / "wer.json"
    assert main(["eval", "wer", "--audio-dir", str(joe_clips),
                 "--sentences", str(sentences_file), "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    record = json.loads(out.read_text())
    print(printed)
    assert len(record["clips"]) == CLIPS
    assert record["wer"] <= 0.05
    assert f"overall word error rate {record['wer']:.4f}" in printed
    # The normalizer makes "6:45" and "six forty five" the same words.
    bakery = next(c for c in record["clips"] if "6:45" in c["text"])
    assert "six forty five" in bakery["reference"]


def test_eval_wer_on_the_wrong_text_is_high(joe_clips, sentences_file, reuse_whisper, tmp_path,
                                            capsys):
    swapped = tmp_path / "swapped"
    swapped.mkdir()
    shutil.copy(joe_clips / "000.wav", swapped / "001.wav")
    shutil.copy(joe_clips / "001.wav", swapped / "000.wav")
    out = tmp_path / "wer.json"
    assert main(["eval", "wer", "--audio-dir", str(swapped),
                 "--sentences", str(sentences_file), "--out", str(out)]) == 0
    assert json.loads(out.read_text())["wer"] > 0.6


def test_eval_wer_reports_clips_without_a_text(joe_clips, reuse_whisper, tmp_path, capsys):
    short = tmp_path / "one.txt"
    short.write_text("Only one line.\n")
    assert main(["eval", "wer", "--audio-dir", str(joe_clips), "--sentences", str(short)]) == 2
    assert "clip 001.wav is for text 1" in capsys.readouterr().err


def other_voices(texts: list[str], joe: Path, root: Path) -> dict[str, Path]:
    """espeak-ng's voice on the same texts when it can be loaded, and joe pitch-shifted up by
    four semitones (same length, a different-sounding speaker)."""
    import librosa

    voices = {}
    listing = root / "texts.txt"
    listing.write_text("\n".join(texts) + "\n")
    espeak = root / "espeak"
    espeak.mkdir()
    if subprocess.run([sys.executable, str(ESPEAK_VOICE), str(listing), str(espeak)],
                      timeout=120).returncode == 0:
        voices["espeak"] = espeak
    shifted = root / "shifted"
    shifted.mkdir()
    for i in range(len(texts)):
        audio, rate = load_clip(joe / f"{i:03d}.wav")
        write_clip(shifted / f"{i:03d}.wav",
                   librosa.effects.pitch_shift(audio, sr=rate, n_steps=4), rate)
    voices["shifted"] = shifted
    return voices


def test_eval_speaker_separates_joe_from_other_voices(joe_server, joe_clips, sentences,
                                                      tmp_path, capsys):
    n = 5
    joe = tmp_path / "joe"
    joe.mkdir()
    for i in range(n):
        shutil.copy(joe_clips / f"{i:03d}.wav", joe)
    again = speak_all(joe_server.url, list(sentences[:3]), tmp_path / "again")
    ref = speak_all(joe_server.url, [data_file("case_paragraph.txt").read_text().strip()],
                    tmp_path / "ref") / "000.wav"
    others = other_voices(list(sentences[:n]), joe, tmp_path)
    out = tmp_path / "speaker.json"
    folders = [f"joe={joe}", f"again={again}", *[f"{k}={v}" for k, v in others.items()]]
    assert main(["eval", "speaker", "--ref", str(ref), *folders, "--out", str(out)]) == 0
    print(capsys.readouterr().out)
    record = json.loads(out.read_text())
    similarity = {s["name"]: s for s in record["similarity"]}
    assert similarity["joe"]["mean"] >= 0.8
    for name in others:
        assert similarity["joe"]["min"] > similarity[name]["mean"] + 0.2, name
        assert max(similarity[name]["clips"].values()) < similarity["joe"]["min"], name
    pairs = {(p["a"], p["b"]): p for p in record["identity"]}
    # Same text, same seed, same server: the same bytes.
    assert pairs[("joe", "again")]["counts"] == {"identical": 3, "different_length": 0,
                                                  "same_length": 0}
    shifted = pairs[("joe", "shifted")]
    assert shifted["counts"]["same_length"] == n and shifted["median_snr_db"] < 10
    if "espeak" in others:
        assert pairs[("joe", "espeak")]["counts"]["different_length"] == n
    assert all(np.isfinite(v) for v in similarity["joe"]["clips"].values())
