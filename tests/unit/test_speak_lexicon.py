"""`voxflow speak --lexicon NAME_OR_FILE` on the tiny voice (joe's phoneme table): a saved
lexicon's name or a JSON/PLS file applied as the server applies a request's `lexicon` (the same
bytes as the respelled text or the SSML `<phoneme>`), with `--long` too, and every bad value a
one-line error with exit status 2."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from killed_job import run_killed_after_first_segment

from voxflow.cli import main

TABLE = "tˈeɪbəl"  # espeak-ng's IPA for "table"
ENTRIES = {"entries": [{"word": "Zorbleck", "phonemes": TABLE},
                       {"word": "colour", "respelling": "purple"}]}
PLS = ('<lexicon version="1.0" xmlns="http://www.w3.org/2005/01/pronunciation-lexicon" '
       f'alphabet="ipa"><lexeme><grapheme>Zorbleck</grapheme><phoneme>{TABLE}</phoneme>'
       '</lexeme><lexeme><grapheme>colour</grapheme><alias>purple</alias></lexeme></lexicon>')
TEXT = "The colour of the Zorbleck is red."
RESPELLED = f'<speak>The purple of the <phoneme ph="{TABLE}">Zorbleck</phoneme> is red.</speak>'


@pytest.fixture
def saved(tmp_path: Path) -> Path:
    """A lexicons folder holding `ENTRIES` as ``house``."""
    folder = tmp_path / "lexicons"
    folder.mkdir()
    (folder / "house.json").write_text(json.dumps(ENTRIES), encoding="utf-8")
    return folder


@pytest.fixture
def base(tiny_voice_dir: Path, saved: Path) -> list[str]:
    """``speak`` on the tiny voice, seeded, with `saved` as ``server.lexicons_dir``."""
    return [
        "speak", "--seed", "7", "--no-progress",
        "--set", f"models.0.options.voices_dir={tiny_voice_dir}",
        "--set", "models.0.options.include_default_voice=false",
        "--set", "models.0.options.default_voice=tiny",
        "--set", "models.0.voice_aliases={}",
        "--set", f"server.lexicons_dir={saved}",
    ]


def speak(base: list[str], out: Path, *extra: str) -> bytes:
    """Run ``speak`` (exit 0 asserted) and return the file's bytes."""
    assert main([*base, *extra, "-o", str(out)]) == 0
    return out.read_bytes()


def fails(base: list[str], out: Path, capsys: pytest.CaptureFixture, *extra: str) -> str:
    """Run ``speak``, assert exit 2, one error line (the last) and no file; return it."""
    capsys.readouterr()
    assert main([*base, *extra, "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    last = err.strip().splitlines()[-1]  # after "loaded model ..." where the engine refused
    assert last.startswith("voxflow: ") and err.count("voxflow: ") == 1
    assert not out.exists()
    return last


def test_a_saved_name_a_json_file_and_a_pls_file_read_as_the_server_reads(
        base: list[str], tmp_path: Path) -> None:
    (tmp_path / "house.pls").write_text(PLS, encoding="utf-8")
    (tmp_path / "mine.json").write_text(json.dumps(ENTRIES), encoding="utf-8")
    expected = speak(base, tmp_path / "ssml.wav", RESPELLED)
    plain = speak(base, tmp_path / "plain.wav", TEXT)
    assert expected != plain
    assert speak(base, tmp_path / "named.wav", "--lexicon", "house", TEXT) == expected
    assert speak(base, tmp_path / "json.wav", "--lexicon", str(tmp_path / "mine.json"),
                 TEXT) == expected
    assert speak(base, tmp_path / "pls.wav", "--lexicon", str(tmp_path / "house.pls"),
                 TEXT) == expected


def test_a_saved_name_wins_over_a_file_of_that_name(
        base: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    Path("house").write_text(json.dumps({"entries": [{"word": "colour", "respelling": "blue"}]}))
    saved = speak(base, tmp_path / "saved.wav", "--lexicon", "house", TEXT)
    assert saved == speak(base, tmp_path / "ssml.wav", RESPELLED)
    from_file = speak(base, tmp_path / "file.wav", "--lexicon", "./house", TEXT)
    assert from_file == speak(base, tmp_path / "blue.wav", "The blue of the Zorbleck is red.")


def test_an_empty_lexicon_turns_the_configured_default_off(
        base: list[str], tmp_path: Path) -> None:
    default = [*base, "--set", "models.0.lexicon=house"]
    assert speak(default, tmp_path / "d.wav", TEXT) == speak(base, tmp_path / "s.wav", RESPELLED)
    assert speak(default, tmp_path / "off.wav", "--lexicon", "", TEXT) == speak(
        base, tmp_path / "plain.wav", TEXT)


def test_bad_values_are_one_line_errors_naming_them(
        base: list[str], tmp_path: Path, saved: Path, capsys: pytest.CaptureFixture) -> None:
    out = tmp_path / "out.wav"
    err = fails(base, out, capsys, "--lexicon", "nope", TEXT)
    assert err == (f"voxflow: --lexicon nope: no saved lexicon of that name in {saved} "
                   "(saved: house) and no such file")
    bad_entry = tmp_path / "both.json"
    bad_entry.write_text(json.dumps({"entries": [{"word": "x", "phonemes": "a",
                                                  "respelling": "b"}]}))
    assert fails(base, out, capsys, "--lexicon", str(bad_entry), TEXT) == (
        f"voxflow: --lexicon {bad_entry}: Lexicon entry entries[0] ('x'): give exactly one "
        "of 'phonemes' (IPA) and 'respelling', not both.")
    not_json = tmp_path / "broken.json"
    not_json.write_text("{not json")
    assert "--lexicon " + str(not_json) + ": not a JSON lexicon (" in fails(
        base, out, capsys, "--lexicon", str(not_json), TEXT)
    sampa = tmp_path / "sampa.pls"
    sampa.write_text("<lexicon alphabet='x-sampa'/>")
    assert "alphabet 'x-sampa' is not supported" in fails(
        base, out, capsys, "--lexicon", str(sampa), TEXT)
    unreadable = tmp_path / "binary.json"
    unreadable.write_bytes(b"\xff\xfe\x00garbage")
    assert "not a JSON lexicon" in fails(base, out, capsys, "--lexicon", str(unreadable), TEXT)
    # the voice cannot say it: the engine's 400, naming the file as the lexicon
    clicks = tmp_path / "clicks.json"
    clicks.write_text(json.dumps({"entries": [{"word": "tsk", "phonemes": "жʘж"}]}))
    assert fails(base, out, capsys, "--lexicon", str(clicks), TEXT).startswith(
        f"voxflow: Lexicon '{clicks}' entry entries[0] ('tsk'): phonemes 'жʘж' use 'ж', which "
        "voice 'tiny' of model 'piper' has no phoneme for")
    # a saved lexicon's file the server would refuse at start-up
    (saved / "broken.json").write_text("[]")
    assert "lexicon " + str(saved / "broken.json") in fails(
        base, out, capsys, "--lexicon", "house", TEXT)


BOOK = "# One\n\nThe colour of the first part. It has two sentences.\n\n# Two\n\nA Zorbleck.\n"


def test_speak_long_reads_with_the_lexicon_and_resumes_only_with_the_same_one(
        base: list[str], tmp_path: Path, capsys: pytest.CaptureFixture,
        monkeypatch: pytest.MonkeyPatch) -> None:
    lexicon = tmp_path / "respell.json"
    lexicon.write_text(json.dumps({"entries": [{"word": "colour", "respelling": "purple"}]}))
    book, respelled = tmp_path / "book.md", tmp_path / "respelled.md"
    book.write_text(BOOK)
    respelled.write_text(BOOK.replace("colour", "purple"))
    long = [*base, "--long"]
    expected = speak(long, tmp_path / "expected.wav", "-f", str(respelled))
    assert speak(long, tmp_path / "plain.wav", "-f", str(book)) != expected
    with_lexicon = [*long, "-f", str(book), "--lexicon", str(lexicon)]
    assert speak(with_lexicon, tmp_path / "lexed.wav") == expected
    # interrupted after its first segment, then rerun with the lexicon changed: refused
    out = tmp_path / "resumed.wav"
    run_killed_after_first_segment(monkeypatch, [*with_lexicon, "-o", str(out)])
    lexicon.write_text(json.dumps({"entries": [{"word": "colour", "respelling": "blue"}]}))
    capsys.readouterr()
    assert main([*with_lexicon, "-o", str(out)]) == 2
    assert "holds a job of another text or other options" in capsys.readouterr().err
    # with the lexicon it was made with, it resumes to the bytes of an uninterrupted run
    lexicon.write_text(json.dumps({"entries": [{"word": "colour", "respelling": "purple"}]}))
    assert main([*with_lexicon, "-o", str(out)]) == 0
    assert "resuming: 1 segments already done" in capsys.readouterr().err
    assert out.read_bytes() == expected
