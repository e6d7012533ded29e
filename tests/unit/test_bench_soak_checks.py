"""`voxflow bench soak`'s bad requests and verdicts without a server: the error shape, the
spoiled bodies, leaving clients, the solo re-send of seeded requests, and each PASS/FAIL."""

from __future__ import annotations

import asyncio
import io
import json

import httpx
import numpy as np
import pytest
import soundfile as sf

from voxflow.bench.soak import RssSample, SoakRecord, SoakRequest, send
from voxflow.bench.soak_bad import BAD_CASES, bad_body, error_code
from voxflow.bench.soak_checks import (
    bad_verdict,
    compare_samples,
    flatness,
    identity_verdict,
    lost_verdict,
    resend_seeded,
    rss_verdict,
    server_error_verdict,
    soak_verdicts,
)

MIB = 1 << 20
BODY = {"model": "piper", "voice": "joe", "input": "Hello there.", "response_format": "mp3",
        "stream": True}


def error(code="voice_not_found", param="voice", **extra):
    return json.dumps({"error": {"message": "m", "type": "invalid_request_error",
                                 "param": param, "code": code, **extra}}).encode()


def test_error_code_reads_the_openai_error_shape():
    assert error_code(error()) == "voice_not_found"
    assert error_code(error(param=None)) == "voice_not_found"


@pytest.mark.parametrize("data", [
    b"", b"not json", b"[]", b'{"error": "no"}', b'{"detail": "Not Found"}',
    json.dumps({"error": {"message": "m", "type": "t", "code": "c"}}).encode(),  # no param
    error(param=3), error(code=None),
])
def test_anything_else_is_not_an_error_in_openai_shape(data):
    assert error_code(data) is None


def test_each_bad_case_spoils_the_body_in_its_own_way():
    bodies = {case.name: bad_body(case.name, BODY, 100) for case in BAD_CASES}
    parsed = {name: json.loads(data) for name, data in bodies.items() if name != "malformed_json"}
    assert parsed["unknown_voice"]["voice"] == "no-such-voice"
    assert parsed["unknown_model"]["model"] == "no-such-model"
    assert parsed["bad_format"]["response_format"] == "ogg"
    assert parsed["speed_out_of_range"]["speed"] == 5.0
    assert parsed["empty_input"]["input"] == ""
    assert "input" not in parsed["missing_input"] and parsed["missing_input"]["voice"] == "joe"
    assert len(parsed["input_too_long"]["input"]) == 104  # 8 x "Hello there. " > 100
    assert parsed["input_too_long"]["input"].startswith("Hello there. Hello there.")
    with pytest.raises(json.JSONDecodeError):
        json.loads(bodies["malformed_json"])
    assert bodies["malformed_json"] == json.dumps(BODY).encode()[:-1]
    assert {c.name: (c.status, c.code) for c in BAD_CASES}["unknown_model"] == (
        404, "model_not_found")


def test_too_long_input_passes_the_servers_default_limit():
    text = json.loads(bad_body("input_too_long", BODY, 4096))["input"]
    assert 4096 < len(text) <= 4096 + len("Hello there. ")


def chunked(chunks):
    async def stream():
        for chunk in chunks:
            yield chunk
    return stream()


def post(handler):
    async def go(req, **kwargs):
        async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as client:
            return await send(client, "http://x", req, 5.0, **kwargs)
    return go


REQ = SoakRequest(3, "piper", "joe", "wav", True, "Hello there.")


def test_a_leaving_client_reads_the_first_chunk_and_leaves():
    async def handler(request):
        return httpx.Response(200, content=chunked([b"RIFF" * 10, b"x" * 500, b"y" * 500]))

    record = asyncio.run(post(handler)(SoakRequest(3, "piper", "joe", "wav", True, "Hi.",
                                                   leave=True)))
    assert record["kind"] == "leave" and record["left"] is True
    assert record["bytes"] == 40 and record["error"] is None and record["status"] == 200


def test_a_plain_request_reads_every_chunk():
    async def handler(request):
        return httpx.Response(200, content=chunked([b"a" * 40, b"b" * 500]))

    record = asyncio.run(post(handler)(REQ))
    assert record["kind"] == "plain" and "left" not in record and record["bytes"] == 540


@pytest.mark.parametrize(("status", "body", "error_kind"), [
    (400, error("voice_not_found"), None),
    (400, error("invalid_value", param="response_format"), "bad_code"),
    (400, b'{"detail": "bad"}', "bad_shape"),
    (500, error("server_error", param=None), "bad_http_500"),
    (200, b"RIFF....", "bad_http_200"),
])
def test_a_bad_request_must_get_its_cases_status_and_code(status, body, error_kind):
    seen = []

    async def handler(request):
        seen.append(json.loads(request.content))
        return httpx.Response(status, content=body)

    req = SoakRequest(4, "piper", "joe", "mp3", False, "Hi.", bad="unknown_voice")
    record = asyncio.run(post(handler)(req))
    assert seen[0]["voice"] == "no-such-voice"
    assert record["kind"] == "bad" and record["bad"] == "unknown_voice"
    assert record["status"] == status and record["error"] == error_kind


def wav_bytes(samples, riff_size=None):
    out = io.BytesIO()
    sf.write(out, np.asarray(samples, np.float32), 22050, format="WAV", subtype="PCM_16")
    data = bytearray(out.getvalue())
    if riff_size is not None:
        data[4:8] = riff_size.to_bytes(4, "little")
    return bytes(data)


def test_same_samples_in_another_container_header_are_told_apart_from_other_audio():
    tone = np.sin(np.arange(2000) / 10) * 0.5
    a, b = wav_bytes(tone), wav_bytes(tone, riff_size=0xFFFFFFFF)
    assert a != b
    assert compare_samples("wav", a, b)["same_samples"] is True
    other = compare_samples("wav", a, wav_bytes(tone * 0.9))
    assert other["same_samples"] is False and 0.04 < other["max_abs_diff"] < 0.06
    assert compare_samples("mp3", b"junk", b"junk")["same_samples"] is None


def test_seeded_requests_are_sent_again_alone_and_compared():
    tone = np.sin(np.arange(2000) / 10) * 0.5
    answers = {11: wav_bytes(tone), 12: wav_bytes(tone * 0.9)}

    async def handler(request):
        body = json.loads(request.content)
        return httpx.Response(200, content=answers[body["seed"]])

    schedule = [SoakRequest(i, "piper", "joe", "wav", False, "Hi.", seed=10 + i)
                for i in range(3)]
    record = SoakRecord("fake", bodies={1: answers[11], 2: wav_bytes(tone)})

    async def go():
        async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as client:
            await resend_seeded(client, "http://x", schedule, record, 5.0)

    asyncio.run(go())
    assert [(e["index"], e["identical"]) for e in record.solo] == [(1, True), (2, False)]
    assert record.solo[1]["same_samples"] is False and len(record.solo[1]["sha256"]) == 2
    verdict = identity_verdict(record)
    assert verdict.passed is False
    assert verdict.line() == ("FAIL seeded identity: 1 of 2 byte-identical alone "
                              "(#2 same samples: False)")


def result(index, kind="plain", error=None, status=200, **extra):
    return {"index": index, "kind": kind, "error": error, "status": status, **extra}


def test_lost_counts_valid_requests_that_failed_and_names_unsent_ones():
    record = SoakRecord("fake", results=[
        result(0), result(1, "leave", left=True), result(2, "seeded"),
        result(3, "bad", error="bad_code", status=400, bad="unknown_voice", code="x"),
    ])
    assert lost_verdict(record, 4).line() == "PASS lost: 0 of 3 valid requests"
    record.results.append(result(4, "leave", error="truncated", status=200))
    record.results.append(result(5, error="http_504", status=504))
    verdict = lost_verdict(record, 8)
    assert verdict.passed is False
    assert verdict.detail == ("2 of 5 valid requests (#4 truncated, #5 http_504); "
                              "2 not sent (time limit)")


def test_5xx_counts_the_solo_resends_too():
    record = SoakRecord("fake", results=[result(0), result(1, status=None, error="connect")])
    assert server_error_verdict(record).line() == "PASS 5xx: 0 of 2 answers"
    record.solo.append({"index": 0, "status": 500, "error": "http_500", "identical": False})
    assert server_error_verdict(record).line() == "FAIL 5xx: 1 of 3 answers (#0 500)"


def test_bad_verdict_passes_only_when_every_bad_request_got_its_answer():
    good = result(3, "bad", status=404, bad="unknown_model", code="model_not_found")
    record = SoakRecord("fake", results=[result(0), good])
    assert bad_verdict(record).line() == (
        "PASS bad requests: 1 of 1 answered with their 4xx and code")
    record.results.append(result(9, "bad", error="bad_http_500", status=500,
                                 bad="malformed_json", code="server_error"))
    assert bad_verdict(record).line() == (
        "FAIL bad requests: 1 of 2 answered with their 4xx and code "
        "(#9 malformed_json: bad_http_500 server_error)")
    assert bad_verdict(SoakRecord("fake")).passed is None


def samples(mibs):
    return [RssSample(2.0 * i, i, None if m is None else m * MIB) for i, m in enumerate(mibs)]


def test_flatness_compares_the_medians_of_the_second_and_last_quarters():
    # 8 readable samples: quarters [400, 600], [640, 660], [650, 655], [670, 665]
    record = SoakRecord("fake", samples=samples([400, 600, 640, None, 660, 650, 655, 670, 665]))
    assert flatness(record.samples) == (650 * MIB, 667.5 * MIB)
    verdict = rss_verdict(record)
    assert verdict.passed is True
    assert verdict.detail == ("median of the last quarter 668 MiB, second quarter 650 MiB "
                              "(+2.7%, limit ±5%)")


def test_growth_or_drop_past_five_percent_is_not_flat():
    assert rss_verdict(SoakRecord("fake", samples=samples([400, 600, 640, 660, 680, 700,
                                                           700, 710]))).passed is False
    assert rss_verdict(SoakRecord("fake", samples=samples([600, 700, 700, 700, 650, 640,
                                                           650, 660]))).passed is False
    assert rss_verdict(SoakRecord("fake", samples=samples([400, 600, 640, 660, 670, 680,
                                                           670, 680]))).passed is True


def test_too_few_samples_fail_the_flatness_verdict():
    verdict = rss_verdict(SoakRecord("fake", samples=samples([500, None, 510, 520])))
    assert verdict.passed is False and "fewer than 4 readable" in verdict.detail
    assert flatness(samples([500, 510, 520])) is None


def test_verdicts_come_in_their_order():
    record = SoakRecord("fake", results=[result(0)], samples=samples([500] * 8))
    lines = [v.line() for v in soak_verdicts(record, 1)]
    assert lines == ["PASS lost: 0 of 1 valid requests", "PASS 5xx: 0 of 1 answers",
                     "SKIP bad requests: none sent",
                     "SKIP seeded identity: no seeded request answered",
                     "PASS RSS flat: median of the last quarter 500 MiB, second quarter 500 MiB "
                     "(+0.0%, limit ±5%)"]
