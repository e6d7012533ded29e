"""The `voxflow` command line, run in process through `main(argv)` with real (tiny) voices.

Most tests use the generated tiny voice (16 kHz, milliseconds per synthesis); one uses the
packaged joe voice end to end.
"""

from __future__ import annotations

import io
import json
import logging
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
import yaml

from voxflow.cli import main
from voxflow.cli import speak as cli_speak
from voxflow.config import (
    OPENAI_VOICES,
    CacheSettings,
    EngineSettings,
    JobsSettings,
    ServerSettings,
    Settings,
    WyomingSettings,
    load_settings,
)
from voxflow.models.piper.settings import PiperSettings
from voxflow.ray.settings import RaySettings, ray_settings

REPO = Path(__file__).resolve().parents[2]
DEFAULT_CONFIG = REPO / "configs" / "piper.yaml"
TEXT = "The little red kite circled twice above the harbor. Then it settled on the mast."


@pytest.fixture(autouse=True)
def _restore_root_logger():
    """Commands configure the root logger; put its level and handlers back after each test."""
    root = logging.getLogger()
    level, handlers = root.level, list(root.handlers)
    yield
    root.setLevel(level)
    root.handlers[:] = handlers


@pytest.fixture
def tiny_set(tiny_voice_dir: Path) -> list[str]:
    """``--set`` arguments that serve only the tiny voice from the default config (its voice
    aliases name joe, so they go too: an alias of a voice not loaded fails at start)."""
    return [
        "--set", f"models.0.options.voices_dir={tiny_voice_dir}",
        "--set", "models.0.options.include_default_voice=false",
        "--set", "models.0.options.default_voice=tiny",
        "--set", "models.0.voice_aliases={}",
    ]


@pytest.fixture
def tiny_config(tiny_voice_dir: Path, tmp_path: Path) -> Path:
    """A deployment YAML serving only the tiny voice, as model `tiny-piper`."""
    path = tmp_path / "tiny.yaml"
    path.write_text(yaml.safe_dump({
        "models": [{
            "name": "tiny-piper",
            "family": "piper",
            "options": {
                "voices_dir": str(tiny_voice_dir),
                "include_default_voice": False,
                "default_voice": "tiny",
            },
        }],
    }))
    return path


def run_ok(capsys: pytest.CaptureFixture, argv: list[str]) -> tuple[str, str]:
    """Run `main(argv)`, assert exit 0, return (stdout, stderr)."""
    code = main(argv)
    out, err = capsys.readouterr()
    assert code == 0, err
    return out, err


def run_fail(capsys: pytest.CaptureFixture, argv: list[str], code: int = 2) -> str:
    """Run `main(argv)`, assert exit `code` and a one-line-style error; return stderr."""
    assert main(argv) == code
    err = capsys.readouterr().err
    assert "voxflow: " in err
    assert "Traceback" not in err
    return err


# ---- the default deployment ---------------------------------------------------------------------
def test_default_config_validates_and_spells_out_every_default() -> None:
    raw = yaml.safe_load(DEFAULT_CONFIG.read_text())
    settings = load_settings(DEFAULT_CONFIG)
    # ray: is kept as the file spells it and validated by the Ray layer
    assert settings.model_copy(update={"ray": {}}) == load_settings(None)
    assert ray_settings(settings) == ray_settings(load_settings(None)) == RaySettings()
    assert [(m.name, m.family) for m in settings.models] == [("piper", "piper")]
    assert settings.models[0].options.default_voice == "joe"
    assert set(raw) == set(Settings.model_fields)
    assert set(raw["server"]) == set(ServerSettings.model_fields)
    assert set(raw["engine"]) == set(EngineSettings.model_fields)
    assert set(raw["ray"]) == set(RaySettings.model_fields)
    assert set(raw["wyoming"]) == set(WyomingSettings.model_fields)
    assert set(raw["cache"]) == set(CacheSettings.model_fields)
    assert set(raw["jobs"]) == set(JobsSettings.model_fields)
    assert set(raw["models"][0]["options"]) == set(PiperSettings.model_fields)


# ---- speak --------------------------------------------------------------------------------------
def test_speak_writes_a_wav_at_the_voice_rate(capsys, tmp_path, tiny_config) -> None:
    out = tmp_path / "out.wav"
    _, err = run_ok(capsys, ["speak", TEXT, "-o", str(out), "--config", str(tiny_config)])
    info = sf.info(str(out))
    assert info.samplerate == 16000
    assert info.channels == 1
    assert info.frames > 0
    assert "loaded model tiny-piper in " in err
    summary = err.strip().splitlines()[-1]
    assert summary.startswith(f"wrote {out}: {info.frames / 16000:.2f} s of audio at 16000 Hz in ")
    assert "(RTF " in summary


def test_speak_with_a_seed_is_byte_identical(capsys, tmp_path, tiny_config) -> None:
    paths = [tmp_path / f"{name}.wav" for name in ("a", "b", "c")]
    for path, seed in zip(paths, ("7", "7", "8"), strict=True):
        run_ok(capsys, ["speak", TEXT, "-o", str(path), "--seed", seed,
                        "--config", str(tiny_config)])
    a, b, c = (p.read_bytes() for p in paths)
    assert a == b
    assert a != c  # the seed reaches the noise: another seed gives other audio


def test_speak_reads_a_file_with_set_overrides_on_the_default_config(
    capsys, tmp_path, tiny_set, monkeypatch
) -> None:
    monkeypatch.chdir(REPO)  # `configs/piper.yaml` is found relative to the working directory
    text_file = tmp_path / "script.txt"
    text_file.write_text(TEXT + "\n" + TEXT, encoding="utf-8")
    out = tmp_path / "script.flac"
    run_ok(capsys, ["speak", "-f", str(text_file), "-o", str(out), "--seed", "1", *tiny_set])
    audio, rate = sf.read(str(out), dtype="float32")
    assert rate == 16000
    assert audio.ndim == 1 and audio.size > 0
    assert np.abs(audio).max() > 0.01


def test_speak_to_stdout_streams_pcm_equal_to_the_wav_samples(
    capsysbinary, tmp_path, tiny_config
) -> None:
    wav = tmp_path / "ref.wav"
    assert main(["speak", TEXT, "-o", str(wav), "--seed", "3", "--config", str(tiny_config)]) == 0
    capsysbinary.readouterr()
    argv = ["speak", TEXT, "-o", "-", "--format", "pcm", "--seed", "3", "--sample-rate",
            "native", "--config", str(tiny_config)]
    assert main(argv) == 0
    captured = capsysbinary.readouterr()
    samples, rate = sf.read(str(wav), dtype="int16")
    assert captured.out == samples.astype("<i2").tobytes()
    assert f"at {rate} Hz".encode() in captured.err and b"wrote <stdout>: " in captured.err


def test_speak_pcm_is_openais_24khz_and_sample_rate_picks_another(
    capsysbinary, tmp_path, tiny_config
) -> None:
    # issue 38 item 1: pcm at 24 kHz whatever the voice's rate, as the server sends it; a WAV
    # at --sample-rate 24000 holds the same samples
    base = ["speak", TEXT, "--seed", "3", "--config", str(tiny_config)]
    assert main([*base, "-o", "-", "--format", "pcm"]) == 0
    pcm = capsysbinary.readouterr()
    assert b"at 24000 Hz" in pcm.err
    wav = tmp_path / "24k.wav"
    assert main([*base, "-o", str(wav), "--sample-rate", "24000"]) == 0
    capsysbinary.readouterr()
    samples, rate = sf.read(str(wav), dtype="int16")
    assert rate == 24000 and pcm.out == samples.astype("<i2").tobytes()
    low = tmp_path / "8k.flac"
    assert main([*base, "-o", str(low), "--sample-rate", "8000"]) == 0
    assert sf.info(str(low)).samplerate == 8000
    assert sf.info(str(low)).frames == pytest.approx(len(samples) / 3, abs=1)


@pytest.mark.parametrize(("argv", "message"), [
    (["-o", "x.opus", "--sample-rate", "22050"],
     "voxflow: --sample-rate: opus cannot be encoded at 22050 Hz; it takes 8000, "
     "12000, 16000, 24000, 48000"),
    (["-o", "x.wav", "--sample-rate", "96000"],
     "voxflow: --sample-rate: 96000 Hz is outside 8000 to 48000; or send "
     '"native" for the model\'s own rate'),
])
def test_speak_refuses_a_rate_the_file_cannot_have(capsys, tmp_path, argv, message) -> None:
    argv = [a.replace("x.", str(tmp_path / "x.")) for a in argv]
    assert main(["speak", "Hello.", *argv]) == 2
    assert message in capsys.readouterr().err


def test_speak_has_no_server_input_limit(capsys, tmp_path, tiny_config) -> None:
    text = " ".join(["One more sentence for the long file."] * 130)  # > 4,096 characters
    assert len(text) > 4096
    out = tmp_path / "long.wav"
    run_ok(capsys, ["speak", text, "-o", str(out), "--config", str(tiny_config)])
    assert sf.info(str(out)).frames > 0


def test_speak_unknown_voice_exits_2_naming_it(capsys, tmp_path, tiny_config) -> None:
    out = tmp_path / "out.wav"
    err = run_fail(capsys, ["speak", TEXT, "-o", str(out), "--voice", "nobody",
                            "--config", str(tiny_config)])
    assert "'nobody'" in err
    assert "tiny" in err  # the available voices are listed
    assert not out.exists()


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["   ", "-o", "x.wav"], "empty"),
        (["-f", "/no/such/file.txt", "-o", "x.wav"], "/no/such/file.txt"),
        ([TEXT, "-o", "x.wav", "--format", "ogg-vorbis"], "ogg-vorbis"),
        ([TEXT, "-o", "x.xyz"], "x.xyz"),
        ([TEXT, "-o", "-"], "--format"),
        ([TEXT, "-o", "x.wav", "--speed", "9"], "--speed"),
        ([TEXT, "-o", "/no/such/dir/x.wav"], "/no/such/dir"),
        ([TEXT, "-o", "x.wav", "--model", "nope"], "'nope'"),
        (["-o", "x.wav"], "-f FILE"),
    ],
)
def test_speak_input_errors_exit_2_before_loading(capsys, tmp_path, monkeypatch, argv, expected):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "stdin", TerminalStdin())  # nothing piped: no text at all
    monkeypatch.setattr(cli_speak, "synthesize", _must_not_run)
    err = run_fail(capsys, ["speak", *argv])
    assert expected in err


def test_speak_empty_file_exits_2(capsys, tmp_path) -> None:
    empty = tmp_path / "empty.txt"
    empty.write_text("\n  \n")
    err = run_fail(capsys, ["speak", "-f", str(empty), "-o", str(tmp_path / "x.wav")])
    assert str(empty) in err


def test_speak_unspeakable_text_writes_a_short_silence_and_says_so(
    capsys, tmp_path, tiny_config
) -> None:
    # as the server answers it (issue 38 item 4)
    out = tmp_path / "x.wav"
    _, err = run_ok(capsys, ["speak", "... !!! ...", "-o", str(out), "--config",
                             str(tiny_config)])
    assert "note: the text has nothing speakable (only punctuation or symbols): the audio is " \
        "silence" in err
    samples, rate = sf.read(str(out), dtype="int16")
    assert samples.size == round(0.2 * rate) and not samples.any()


def _must_not_run(*args, **kwargs):
    raise AssertionError("the engine must not start for a bad request")


class TerminalStdin(io.StringIO):
    """A stdin that is a terminal (nothing piped in)."""

    def isatty(self) -> bool:
        return True


class PipedStdin(io.StringIO):
    """A stdin with text piped in."""

    def isatty(self) -> bool:
        return False


# ---- configuration errors -----------------------------------------------------------------------
def test_bad_config_field_exits_2_naming_the_field(capsys, tmp_path, tiny_set) -> None:
    err = run_fail(capsys, ["speak", TEXT, "-o", str(tmp_path / "x.wav"), "--config",
                            str(DEFAULT_CONFIG), *tiny_set, "--set", "models.0.options.workers=0"])
    # config.py's docstring promises the full path, "models[0].options.workers"; today the
    # family's nested validation drops ".options", so only its ends are checked here.
    assert "models[0]" in err and ".workers: " in err


def test_unknown_field_in_a_config_file_exits_2(capsys, tmp_path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("server:\n  portt: 9000\nmodels:\n  - {name: piper, family: piper}\n")
    err = run_fail(capsys, ["voices", "--config", str(bad)])
    assert "server.portt" in err


def test_serve_reports_config_errors_without_starting(capsys, monkeypatch) -> None:
    monkeypatch.setattr("voxflow.server.shutdown.serve_app", _must_not_run)
    err = run_fail(capsys, ["serve", "--config", str(DEFAULT_CONFIG), "--port", "70000"])
    assert "server.port" in err
    err = run_fail(capsys, ["serve", "--config", str(tmp_missing := "/no/such/config.yaml")])
    assert tmp_missing in err
    err = run_fail(capsys, ["serve", "--set", "server.port"])
    assert "server.port" in err


def test_serve_maps_flags_and_logs_the_settings_as_json(capsys, monkeypatch) -> None:
    calls = {}

    def fake_run(app, **kwargs):
        calls.update(kwargs, app=app)

    monkeypatch.setattr("voxflow.server.shutdown.serve_app", fake_run)
    monkeypatch.setattr("voxflow.server.app.create_app", lambda settings: ("app", settings))
    argv = ["serve", "--config", str(DEFAULT_CONFIG), "--host", "0.0.0.0", "--port", "9123",
            "--set", "server.port=1", "--set", "engine.max_inflight_requests=4",
            "--set", "server.log_level=debug"]  # the whole settings are logged at DEBUG
    _, err = run_ok(capsys, argv)
    assert calls["host"] == "0.0.0.0"
    assert calls["port"] == 9123  # --port wins over --set server.port
    assert calls["log_level"] == "debug"
    assert calls["drain_timeout_s"] == 30.0  # server.drain_timeout_s: SIGTERM drains this long
    settings = calls["app"][1]
    assert settings.engine.max_inflight_requests == 4
    logged = next(line for line in err.splitlines() if "settings: {" in line)
    as_json = json.loads(logged.split("settings: ", 1)[1])
    # Every server field is logged: the defaults, with the flags' host, port and log level.
    assert as_json["server"] == {**ServerSettings().model_dump(mode="json"), "host": "0.0.0.0",
                                 "port": 9123, "log_level": "debug"}
    assert as_json["server"]["max_input_chars"] == 4096
    assert as_json["models"][0]["options"]["default_voice"] == "joe"


def test_item4_serve_turns_uvicorn_access_log_off(capsys, monkeypatch) -> None:
    calls = {}
    monkeypatch.setattr("voxflow.server.shutdown.serve_app",
                        lambda app, **kwargs: calls.update(kwargs))
    monkeypatch.setattr("voxflow.server.app.create_app", lambda settings: "app")
    run_ok(capsys, ["serve", "--config", str(DEFAULT_CONFIG), "--port", "9124"])
    # voxflow.access writes the one line per request; uvicorn's would be a second.
    assert calls["access_log"] is False


# ---- voices -------------------------------------------------------------------------------------
def test_voices_json_lists_the_tiny_voice(capsys, tiny_config) -> None:
    out, _ = run_ok(capsys, ["voices", "--config", str(tiny_config), "--json"])
    tiny = {"id": "tiny", "object": "voice", "model": "tiny-piper", "family": "piper",
            "language": "en-US", "languages": ["en-US"], "sample_rate": 16000, "default": True}
    rows = json.loads(out)
    assert rows[0] == tiny
    # then OpenAI's 13 names, each standing for the model's default voice (issue 38 item 5)
    assert rows[1:] == [{**tiny, "id": name, "alias_of": "tiny", "default": False}
                        for name in OPENAI_VOICES]


def test_item9_voices_json_has_the_shape_of_the_api_voices(capsys, tiny_config) -> None:
    """Issue 8 item 9: `voices --json` items are exactly `GET /v1/audio/voices` items ("id",
    not "voice"), for the same configuration."""
    from fastapi.testclient import TestClient

    from voxflow.server.app import create_app

    out, _ = run_ok(capsys, ["voices", "--config", str(tiny_config), "--json"])
    cli = json.loads(out)
    with TestClient(create_app(load_settings(tiny_config))) as client:
        api = client.get("/v1/audio/voices").json()["data"]
    assert cli == api
    assert [v["id"] for v in cli] == ["tiny", *OPENAI_VOICES] and "voice" not in cli[0]


@pytest.fixture
def alias_config(tiny_voice_dir: Path, tmp_path: Path) -> Path:
    """The tiny voice as model `tiny-piper`, with the OpenAI names `tts-1` and `alloy`."""
    path = tmp_path / "aliases.yaml"
    path.write_text(yaml.safe_dump({"models": [{
        "name": "tiny-piper", "family": "piper", "aliases": ["tts-1"],
        "voice_aliases": {"alloy": "tiny"},
        "options": {"voices_dir": str(tiny_voice_dir), "include_default_voice": False,
                    "default_voice": "tiny"},
    }]}))
    return path


def test_item2_speak_takes_model_and_voice_aliases_and_voices_lists_them(
    capsys, alias_config, tmp_path
) -> None:
    """Issue 8 item 2 in the CLI: `--model tts-1 --voice alloy` speak with the served model and
    voice (same bytes as their own names), and `voices` lists the aliases as the API does."""
    by_alias, by_name = tmp_path / "alias.wav", tmp_path / "name.wav"
    run_ok(capsys, ["speak", TEXT, "-o", str(by_alias), "--seed", "3", "--config",
                    str(alias_config), "--model", "tts-1", "--voice", "alloy"])
    _, err = run_ok(capsys, ["speak", TEXT, "-o", str(by_name), "--seed", "3", "--config",
                             str(alias_config), "--model", "tiny-piper", "--voice", "tiny"])
    assert by_alias.read_bytes() == by_name.read_bytes()
    assert "loaded model tiny-piper" in err
    out, _ = run_ok(capsys, ["voices", "--config", str(alias_config), "--json"])
    rows = json.loads(out)
    assert [(r["id"], r.get("alias_of")) for r in rows] == [
        ("tiny", None), ("alloy", "tiny"), *((n, "tiny") for n in OPENAI_VOICES if n != "alloy")]
    table, _ = run_ok(capsys, ["voices", "--config", str(alias_config), "--model", "tts-1"])
    assert table.splitlines()[2].split()[:3] == ["alloy", "->", "tiny"]
    err = run_fail(capsys, ["speak", TEXT, "-o", str(by_alias), "--config", str(alias_config),
                            "--voice", "nobody"])
    assert "Voice 'nobody' is not a voice of model 'tiny-piper'" in err
    assert f"(aliases: {', '.join(sorted(OPENAI_VOICES))})" in err


def test_voices_table_and_unknown_model(capsys, tiny_config) -> None:
    out, _ = run_ok(capsys, ["voices", "--config", str(tiny_config)])
    header, row = out.splitlines()[:2]
    assert header.split() == ["VOICE", "MODEL", "FAMILY", "LANGUAGES", "SAMPLE_RATE"]
    assert row.split() == ["tiny", "*", "tiny-piper", "piper", "en-US", "16000"]
    err = run_fail(capsys, ["voices", "--config", str(tiny_config), "--model", "piper"])
    assert "'piper'" in err and "tiny-piper" in err


# ---- process-level behaviour --------------------------------------------------------------------
def test_module_entry_point_and_no_logging_at_import() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "voxflow", "--help"], capture_output=True, text=True, cwd=REPO,
        check=False,
    )
    assert result.returncode == 0
    for command in ("serve", "speak", "voices"):
        assert command in result.stdout
    probe = "import logging, voxflow.cli; print(len(logging.getLogger().handlers))"
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                            check=True)
    assert result.stdout.strip() == "0"


def test_speak_with_the_real_joe_voice(capsys, tmp_path) -> None:
    out = tmp_path / "joe.wav"
    run_ok(capsys, ["speak", "Please have your boarding pass ready at the checkpoint.",
                    "-o", str(out), "--config", str(DEFAULT_CONFIG), "--voice", "joe"])
    info = sf.info(str(out))
    assert info.samplerate == 22050
    assert 0.5 < info.duration < 10


# ---- issue 8, items 7 and 8 ---------------------------------------------------------------------
@pytest.mark.parametrize("target", ["/proc/x.wav", "DIR", "DIR/sub.wav", "/no/such/dir/x.wav"])
def test_item7_unwritable_output_exits_2_before_loading(capsys, tmp_path, monkeypatch, target):
    """Issue 8 item 7: `-o /proc/x.wav`, `-o some_directory` (with or without a suffix) and a
    missing folder fail at once with one line and exit 2, before any model is loaded."""
    (tmp_path / "sub.wav").mkdir()
    target = target.replace("DIR", str(tmp_path))
    monkeypatch.setattr(cli_speak, "synthesize", _must_not_run)
    argv = ["speak", TEXT, "-o", target]
    if not Path(target).suffix:
        argv += ["--format", "wav"]
    err = run_fail(capsys, argv)
    assert err.startswith(f"voxflow: cannot write {target}: ") and err.count("\n") == 1, err
    if Path(target).is_dir():
        assert "is a directory" in err
    assert not Path("/proc/x.wav").exists()


def test_item7_output_check_leaves_no_file_behind(tmp_path) -> None:
    """Issue 8 item 7: the write check creates nothing and leaves an existing file's bytes."""
    new, old = tmp_path / "new.wav", tmp_path / "old.wav"
    old.write_bytes(b"keep")
    cli_speak.check_output(str(new))
    cli_speak.check_output(str(old))
    assert not new.exists() and old.read_bytes() == b"keep"


def test_item7_format_contradicting_the_suffix_is_refused(capsys, tmp_path, monkeypatch):
    """Issue 8 item 7: `-o b.wav --format mp3` is refused (exit 2, nothing written) instead of
    writing MP3 bytes into a .wav."""
    monkeypatch.setattr(cli_speak, "synthesize", _must_not_run)
    out = tmp_path / "b.wav"
    err = run_fail(capsys, ["speak", TEXT, "-o", str(out), "--format", "mp3"])
    assert f"--format mp3 contradicts the suffix of {out} (wav)" in err
    assert not out.exists()


def test_item7_format_comes_from_the_suffix_or_agrees_with_it(capsys, tmp_path, tiny_config):
    """Issue 8 item 7: without --format the suffix decides (b.mp3 is MP3); --format that agrees
    (.ogg + opus) or names the format of a file without a known suffix is accepted."""
    cases = [("b.mp3", None, "MP3"), ("c.ogg", "opus", "OGG"), ("d.audio", "wav", "WAV"),
             ("e.WAV", "wav", "WAV")]
    for name, fmt, container in cases:
        out = tmp_path / name
        argv = ["speak", TEXT, "-o", str(out), "--config", str(tiny_config)]
        run_ok(capsys, argv + (["--format", fmt] if fmt else []))
        assert sf.info(str(out)).format == container, name


def test_item8_language_reaches_the_engine_request(capsys, tmp_path, tiny_config) -> None:
    """Issue 8 item 8: `--language` is the API's `language`: one the voice speaks is accepted,
    another is refused by the engine (exit 2, naming it)."""
    out = tmp_path / "x.wav"
    base = ["speak", TEXT, "-o", str(out), "--config", str(tiny_config), "--seed", "2"]
    run_ok(capsys, [*base, "--language", "en"])
    assert sf.info(str(out)).frames > 0
    err = run_fail(capsys, [*base, "--language", "ja"])
    assert "does not speak language 'ja'" in err and "en-US" in err


def test_item8_unquoted_words_and_piped_stdin_give_the_same_audio(
    capsys, tmp_path, tiny_config, monkeypatch
) -> None:
    """Issue 8 item 8: `speak Hi there -o x.wav` (words joined with spaces) and
    `echo "Hi there" | speak -o x.wav` speak exactly the text `speak "Hi there"` does."""
    words = TEXT.split()
    common = ["--config", str(tiny_config), "--seed", "5"]
    quoted, unquoted, piped = (tmp_path / f"{n}.wav" for n in ("quoted", "unquoted", "piped"))
    run_ok(capsys, ["speak", TEXT, "-o", str(quoted), *common])
    run_ok(capsys, ["speak", *words, "-o", str(unquoted), *common])
    monkeypatch.setattr(sys, "stdin", PipedStdin(TEXT + "\n"))
    run_ok(capsys, ["speak", "-o", str(piped), *common])
    assert quoted.read_bytes() == unquoted.read_bytes() == piped.read_bytes()
    monkeypatch.setattr(sys, "stdin", PipedStdin("  \n"))
    err = run_fail(capsys, ["speak", "-o", str(tmp_path / "empty.wav"), *common])
    assert "stdin has no text to speak" in err
    err = run_fail(capsys, ["speak", "Hi", "-f", "x.txt", "-o", str(tmp_path / "y.wav")])
    assert "not both" in err


def test_item8_piped_text_from_a_real_shell_pipe(tmp_path, tiny_config) -> None:
    """Issue 8 item 8: `echo hi there | voxflow speak -o x.wav` in a real process."""
    out = tmp_path / "x.wav"
    result = subprocess.run(
        [sys.executable, "-m", "voxflow", "speak", "-o", str(out), "--config", str(tiny_config)],
        input="Hi there, this came through a pipe.\n", capture_output=True, text=True,
        check=False, cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr
    assert sf.info(str(out)).samplerate == 16000 and sf.info(str(out)).frames > 0


def test_item8_progress_bar_ends_at_the_summary(capsys, tmp_path, tiny_config) -> None:
    """Issue 8 item 8: the last state the progress bar draws has every segment and the audio
    seconds of the summary line (it used to stop one segment behind)."""
    out = tmp_path / "p.wav"
    text = " ".join(f"Sentence number {n} is here." for n in range(1, 8))
    _, err = run_ok(capsys, ["speak", text, "-o", str(out), "--progress",
                             "--config", str(tiny_config)])
    states = [s for s in re.split(r"[\r\n]", err) if s.startswith("synthesizing:")]
    last = states[-1]
    done, total = map(int, re.search(r"(\d+)/(\d+)", last).groups())
    assert done == total >= 7, last
    seconds = sf.info(str(out)).duration
    summary = err.strip().splitlines()[-1]
    assert f"{seconds:.2f} s of audio" in summary
    assert f"{seconds:.1f} s audio" in last, (last, summary)


def test_item8_opus_summary_prints_the_rate_of_the_file(capsys, tmp_path) -> None:
    """Issue 8 item 8: Opus from the 22,050 Hz joe voice is a 48 kHz file, and the summary
    says 48000 Hz (not the voice's 22,050)."""
    out = tmp_path / "joe.opus"
    _, err = run_ok(capsys, ["speak", "Short and sweet.", "-o", str(out),
                             "--config", str(DEFAULT_CONFIG)])
    assert sf.info(str(out)).samplerate == 48000
    assert " s of audio at 48000 Hz in " in err.strip().splitlines()[-1]


def test_issue38_openai_voices_resolve_on_a_model_that_configures_none(
    capsys, tiny_config, tmp_path
) -> None:
    """A model with no voice_aliases still takes OpenAI's names (its default voice)."""
    by_openai, by_name = tmp_path / "cedar.wav", tmp_path / "tiny.wav"
    run_ok(capsys, ["speak", TEXT, "-o", str(by_openai), "--seed", "3", "--config",
                    str(tiny_config), "--voice", "cedar"])
    run_ok(capsys, ["speak", TEXT, "-o", str(by_name), "--seed", "3", "--config",
                    str(tiny_config), "--voice", "tiny"])
    assert by_openai.read_bytes() == by_name.read_bytes() and by_name.stat().st_size > 1000
