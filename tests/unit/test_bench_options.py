"""Bench and eval argument validation, pass-through extras, arm specs and rotation order."""

from __future__ import annotations

import argparse

import pytest

from voxflow.bench.adapters import Target, dropped_extras, make_adapter
from voxflow.bench.arms import parse_arm, rotation
from voxflow.bench.options import CASES, DATA_DIR, add_request_options
from voxflow.cli import build_parser, main

URL = "http://127.0.0.1:9"  # nothing listens there: a test that got past parsing would fail


@pytest.mark.parametrize(("argv", "message"), [
    (["--repeats", "0"], "--repeats: must be at least 1, got 0"),
    (["--case", "novel"], "unknown case novel; cases: line, paragraph, script"),
    (["--case", "line,sonnet"], "unknown case sonnet"),
    (["--concurrency", "1,x"], "comma-separated list of positive integers"),
    (["--concurrency", "0,2"], "at least 1"),
    (["--concurrency", "4,4"], "repeat"),
    (["--concurrency", ""], "positive integers"),
    (["--per-level", "4"], "at least 5"),
    (["--warmup", "-1"], "0 or more"),
    (["--check", "0"], "--check: must be at least 1"),
    (["--extra", "novalue"], "KEY=VALUE"),
    (["--timeout", "0"], "more than 0"),
])
def test_bench_run_rejects_bad_options_at_parsing(capsys, argv, message):
    assert main(["bench", "run", "--url", URL, *argv]) == 2
    assert message in capsys.readouterr().err


def test_bench_compare_needs_arms_and_valid_runs(capsys):
    assert main(["bench", "compare"]) == 2
    assert "--arm" in capsys.readouterr().err
    assert main(["bench", "compare", "--arm", "a=x {port}", "--runs", "0"]) == 2
    assert "--runs: must be at least 1" in capsys.readouterr().err


@pytest.mark.parametrize(("arms", "message"), [
    (["a=serve {port}"], "two or three --arm"),
    (["a=serve {port}", "a=serve {port}"], "different names"),
    (["a=serve", "b=serve {port}"], "must contain {port}"),
    (["a:grpc=serve {port}", "b=serve {port}"], "unknown engine 'grpc'"),
    (["=serve {port}", "b=serve {port}"], "letters, digits"),
    (["a serve", "b=serve {port}"], "NAME[:ENGINE]=COMMAND"),
])
def test_bench_compare_rejects_bad_arms_before_starting_anything(capsys, arms, message):
    argv = ["bench", "compare", *[x for a in arms for x in ("--arm", a)]]
    assert main(argv) == 2
    assert message in capsys.readouterr().err


def test_defaults_and_case_files_exist():
    args = build_parser().parse_args(["bench", "run", "--case", "line,script", "--case", "line"])
    assert args.concurrency == (1, 4, 8, 16)
    assert (args.per_level, args.warmup, args.repeats, args.stream, args.fmt) == (5, 1, 1, True,
                                                                                  "pcm")
    assert args.idle_timeout == 600.0
    for name in CASES.values():
        assert (DATA_DIR / name).is_file(), name
    from voxflow.bench.options import cases_from

    cases = cases_from(args)
    assert [c.name for c in cases] == ["line", "script"]
    assert len(cases[0].texts) == 1 and cases[1].texts[0].count(".") >= 20


def test_harness_owned_fields_win_over_extras():
    extras = {"model": "other", "input": "not this", "response_format": "mp3", "stream": False,
              "seed": 5, "speed": 1.25, "stream_format": "sse"}
    adapter = make_adapter(Target("openai", URL, extras=extras))
    url, body = adapter.request("Hello.", seed=42)
    assert url == f"{URL}/v1/audio/speech"
    assert body == {"model": "piper", "voice": "joe", "input": "Hello.", "response_format": "pcm",
                    "stream": True, "seed": 42, "speed": 1.25}
    assert dropped_extras(adapter) == ["input", "model", "response_format", "seed", "stream",
                                       "stream_format"]
    # No --seed: an extra seed is still dropped, not sent.
    assert "seed" not in adapter.request("Hello.", seed=None)[1]


def test_piper_http_request_owns_the_text():
    adapter = make_adapter(Target("piper-http", URL, extras={"text": "x", "length_scale": 1.1}))
    url, body = adapter.request("Hello.", seed=3)
    assert url == f"{URL}/synthesize"
    assert body == {"text": "Hello.", "length_scale": 1.1}
    assert not adapter.seeded


def test_extra_values_are_read_as_yaml():
    args = build_parser().parse_args(
        ["bench", "run", "--extra", "speed=1.5", "--extra", "voice={id: joe}"])
    assert args.extra == [("speed", 1.5), ("voice", {"id": "joe"})]


def test_arm_spec_and_rotation():
    arm = parse_arm("vox:piper-http=serve --port {port} --x=1")
    assert (arm.name, arm.engine, arm.command) == ("vox", "piper-http", "serve --port {port} --x=1")
    assert parse_arm("base=serve {port}").engine == "openai"
    assert rotation(["a", "b"], 3) == ["a", "b", "b", "a", "a", "b"]
    assert rotation(["a", "b", "c"], 2) == ["a", "b", "c", "c", "b", "a"]


@pytest.mark.parametrize("argv", [
    ["eval", "wer", "--audio-dir", "x"],
    ["eval", "speaker", "a=b"],
    ["eval", "speaker", "--ref", "r.wav", "nodir"],
])
def test_eval_usage_errors(capsys, argv):
    assert main(argv) == 2
    assert "usage: voxflow eval" in capsys.readouterr().err


def test_no_stream_field_parses_and_sends_no_stream_key():
    args = build_parser().parse_args(["bench", "run", "--url", URL, "--no-stream-field"])
    from voxflow.bench.options import target_from

    target = target_from(args, "openai", URL)
    assert target.stream_field is False
    _, body = make_adapter(target).request("Hello.", seed=7)
    assert body == {"model": "piper", "voice": "joe", "input": "Hello.",
                    "response_format": "pcm", "seed": 7}
    # The default still asks for streaming explicitly; an extra cannot sneak the field back in.
    default = target_from(build_parser().parse_args(["bench", "run", "--url", URL]), "openai", URL)
    assert default.stream_field is True
    assert make_adapter(default).request("Hello.", seed=None)[1]["stream"] is True
    sneaky = make_adapter(Target("openai", URL, stream_field=False, extras={"stream": True}))
    assert "stream" not in sneaky.request("Hello.", seed=None)[1]


def test_no_stream_field_contradicts_no_stream(capsys):
    assert main(["bench", "run", "--url", URL, "--no-stream", "--no-stream-field"]) == 2
    assert "not allowed with" in capsys.readouterr().err


def test_no_stream_field_body_is_the_openai_clients_plain_create_body():
    """Issue 8 acceptance: the bench can send exactly what `audio.speech.create()` sends."""
    import json

    import httpx
    openai = pytest.importorskip("openai")

    sent = []

    def handler(request: httpx.Request) -> httpx.Response:
        sent.append(json.loads(request.content))
        return httpx.Response(200, content=b"\0\0", headers={"content-type": "audio/pcm"})

    client = openai.OpenAI(base_url=f"{URL}/v1", api_key="unused", max_retries=0,
                           http_client=httpx.Client(transport=httpx.MockTransport(handler)))
    client.audio.speech.create(model="piper", voice="joe", input="Hello.",
                               response_format="pcm")
    adapter = make_adapter(Target("openai", URL, stream_field=False))
    assert sent == [adapter.request("Hello.", seed=None)[1]]


def test_an_api_key_is_hidden_in_the_recorded_argv():
    from voxflow.bench.command import redact_argv

    argv = ["voxflow", "bench", "run", "--api-key", "sk-1", "--url", "u", "--api-key=sk-2"]
    assert redact_argv(argv) == ["voxflow", "bench", "run", "--api-key", "**********",
                                 "--url", "u", "--api-key=**********"]
    assert redact_argv(["voxflow", "--api-key"]) == ["voxflow", "--api-key"]


def test_requests_to_voxflow_say_no_store_unless_cache_is_asked():
    from voxflow.bench.options import target_from

    parser = argparse.ArgumentParser()
    add_request_options(parser)
    plain = target_from(parser.parse_args([]), "openai", URL)
    assert plain.headers == {"Cache-Control": "no-store"}
    cached = target_from(parser.parse_args(["--cache", "--api-key", "k"]), "openai", URL)
    assert cached.headers == {"Authorization": "Bearer k"}
    assert target_from(parser.parse_args([]), "piper-http", URL).headers == {}
