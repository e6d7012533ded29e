"""`voxflow bench soak` without a server: RSS parsing, the traffic schedule, the checkpoints of
a run against an in-memory transport, and option validation."""

from __future__ import annotations

import asyncio
import json
from collections import Counter

import httpx
import pytest

from voxflow.bench.memory import parse_rss
from voxflow.bench.soak import (
    PLAIN,
    SoakMix,
    SoakPlan,
    run_soak,
    server_voices,
    soak_schedule,
    soak_table,
)
from voxflow.bench.soak_bad import BAD_CASES
from voxflow.cli import main

METRICS = """\
# HELP process_virtual_memory_bytes Virtual memory size in bytes.
# TYPE process_virtual_memory_bytes gauge
process_virtual_memory_bytes 5.2e+09
# HELP process_resident_memory_bytes Resident memory size in bytes.
# TYPE process_resident_memory_bytes gauge
process_resident_memory_bytes 7.11e+08
voxflow_inflight_requests 0.0
"""
VOICES = [("piper", "joe"), ("kokoro", "jf_alpha"), ("kokoro", "jm_kumo")]
SENTENCES = ["One.", "Two.", "Three.", "Four."]


def test_rss_is_read_from_the_prometheus_line_not_its_help_text():
    assert parse_rss(METRICS) == 711_000_000.0


@pytest.mark.parametrize("text", ["", "voxflow_inflight_requests 0.0\n",
                                  "process_resident_memory_bytes NaN\n",
                                  "process_resident_memory_bytes -1\n",
                                  "process_resident_memory_bytes\n",
                                  'process_resident_memory_bytes{pid="1"} 5\n'])
def test_missing_or_invalid_rss_reads_as_none(text):
    assert parse_rss(text) is None


def test_schedule_alternates_models_and_mixes_formats_voices_and_lengths():
    schedule = soak_schedule(400, VOICES, ("mp3", "opus", "aac", "wav"), SENTENCES, seed=3)
    assert [r.index for r in schedule] == list(range(400))
    assert [r.model for r in schedule[:4]] == ["kokoro", "piper", "kokoro", "piper"]
    assert Counter(r.model for r in schedule) == {"kokoro": 200, "piper": 200}
    assert {r.voice for r in schedule if r.model == "kokoro"} == {"jf_alpha", "jm_kumo"}
    assert {r.voice for r in schedule if r.model == "piper"} == {"joe"}
    assert {r.fmt for r in schedule} == {"mp3", "opus", "aac", "wav"}
    assert {r.stream for r in schedule} == {True, False}
    lengths = Counter(r.text.count(".") for r in schedule)
    assert set(lengths) == {1, 2} and min(lengths.values()) > 150
    assert {r.text for r in schedule if r.text.count(".") == 2} == {
        "One. Two.", "Two. Three.", "Three. Four.", "Four. One."}


def test_same_seed_gives_the_same_schedule_and_another_seed_a_different_one():
    a = soak_schedule(50, VOICES, ("mp3", "wav"), SENTENCES, seed=1)
    assert a == soak_schedule(50, VOICES, ("mp3", "wav"), SENTENCES, seed=1)
    assert a != soak_schedule(50, VOICES, ("mp3", "wav"), SENTENCES, seed=2)


def test_schedule_without_voices_is_an_error():
    with pytest.raises(ValueError, match="at least one voice"):
        soak_schedule(5, [], ("mp3",), SENTENCES)


class CountingRss:
    """RSS that grows by 1 MiB per read."""

    def __init__(self):
        self.reads = 0

    def describe(self) -> str:
        return "fake"

    async def read(self) -> float:
        self.reads += 1
        return float(self.reads << 20)


def speech_transport(failing: set[str]) -> httpx.MockTransport:
    """A speech endpoint that answers 4 bytes, or 400 for the formats in `failing`."""
    async def handle(request: httpx.Request) -> httpx.Response:
        if json.loads(await request.aread())["response_format"] in failing:
            return httpx.Response(400, json={"error": {"message": "no"}})
        return httpx.Response(200, content=b"abcd")
    return httpx.MockTransport(handle)


def test_seven_requests_with_checkpoints_every_three_sample_after_3_6_and_7():
    schedule = soak_schedule(7, VOICES, ("mp3", "wav"), SENTENCES)
    plan = SoakPlan(requests=7, clients=2, every=3, interval_s=60.0, settle_s=0.01)

    async def go():
        async with httpx.AsyncClient(transport=speech_transport({"wav"})) as client:
            return await run_soak(client, "http://127.0.0.1:1", schedule, plan, CountingRss())

    record = asyncio.run(go())
    assert [c.requests for c in record.checkpoints] == [3, 6, 7]
    assert record.start.requests == 0 and record.start.rss_bytes == float(1 << 20)
    assert all(c.rss_bytes > record.start.rss_bytes for c in record.checkpoints)
    rest = record.at_rest
    assert rest.requests == 7 and rest.rss_bytes > record.checkpoints[-1].rss_bytes
    wav = sum(r.fmt == "wav" for r in schedule)
    assert record.errors() == {"http_400": wav}
    assert sorted(r["index"] for r in record.results) == list(range(7))
    assert all(r["bytes"] == 4 for r in record.results if r["fmt"] == "mp3")
    table = soak_table(record).splitlines()
    assert table[0].split() == ["requests", "seconds", "RSS", "MiB", "vs", "start"]
    assert [row.split()[0] for row in table[1:5]] == ["0", "3", "6", "7"]
    assert table[5].startswith("7 + at rest")
    assert f"errors: http_400: {wav}" in table[-1]


def test_time_limit_stops_sending():
    schedule = soak_schedule(50, VOICES, ("mp3",), SENTENCES)
    plan = SoakPlan(requests=50, clients=1, every=10, interval_s=60.0, max_seconds=1e-9,
                    settle_s=0)

    async def go():
        async with httpx.AsyncClient(transport=speech_transport(set())) as client:
            return await run_soak(client, "http://127.0.0.1:1", schedule, plan, CountingRss())

    record = asyncio.run(go())
    assert record.stopped_by_time and len(record.results) < 50


@pytest.mark.parametrize(("argv", "message"), [
    (["--url", "http://10.0.0.5:8000"], "only targets loopback"),
    (["--url", "https://127.0.0.1:8000"], "only targets loopback"),
    (["--requests", "0"], "must be at least 1"),
    (["--requests", "100001"], "at most 100000"),
    (["--clients", "65"], "at most 64"),
    (["--formats", "mp3,ogg"], "unknown format ogg"),
    (["--max-seconds", "0"], "more than 0"),
    (["--settle", "-1"], "0 to 600 seconds"),
    (["--url", "http://127.0.0.1:9", "--serve", "x {port}"], "not allowed with"),
])
def test_soak_rejects_bad_options_at_parsing(capsys, argv, message):
    assert main(["bench", "soak", *argv]) == 2
    assert message in capsys.readouterr().err


def test_serve_command_without_port_placeholder_is_a_usage_error(capsys):
    assert main(["bench", "soak", "--serve", "true"]) == 2
    assert "{port}" in capsys.readouterr().err


def test_voices_come_from_the_listing_without_their_aliases():
    listing = {"object": "list", "data": [
        {"id": "joe", "model": "piper"},
        {"id": "alloy", "model": "piper", "alias_of": "joe"},
        {"id": "jm_kumo", "model": "kokoro"},
        {"id": "onyx", "model": "kokoro", "alias_of": "jm_kumo"},
    ]}

    async def main_():
        transport = httpx.MockTransport(lambda request: httpx.Response(200, json=listing))
        async with httpx.AsyncClient(transport=transport) as client:
            return (await server_voices(client, "http://x"),
                    await server_voices(client, "http://x", ["kokoro"]))

    every, kokoro = asyncio.run(main_())
    assert every == [("piper", "joe"), ("kokoro", "jm_kumo")]
    assert kokoro == [("kokoro", "jm_kumo")]


def test_mix_makes_exact_disjoint_shares_leaving_requests_streamed():
    schedule = soak_schedule(1000, VOICES, ("mp3", "wav"), SENTENCES, seed=5,
                             mix=SoakMix(leave=0.05, bad=0.01, seeded=0.02))
    kinds = Counter(r.kind for r in schedule)
    assert kinds == {"plain": 920, "leave": 50, "seeded": 20, "bad": 10}
    assert all(r.stream for r in schedule if r.leave)
    assert all(r.seed is None and not r.leave for r in schedule if r.bad)
    seeds = [r.seed for r in schedule if r.seed is not None]
    assert len(seeds) == 20 and all(0 <= s < 1 << 31 for s in seeds) and len(set(seeds)) > 15
    assert [r.body().get("seed") for r in schedule] == [r.seed for r in schedule]


def test_mix_changes_only_the_chosen_requests_of_the_plain_schedule():
    plain = soak_schedule(300, VOICES, ("mp3", "wav"), SENTENCES, seed=5, mix=PLAIN)
    mixed = soak_schedule(300, VOICES, ("mp3", "wav"), SENTENCES, seed=5)
    assert all(r.kind == "plain" for r in plain)
    same = [(p.model, p.voice, p.fmt, p.text) == (m.model, m.voice, m.fmt, m.text)
            for p, m in zip(plain, mixed, strict=True)]
    assert all(same)
    changed = [m.index for p, m in zip(plain, mixed, strict=True) if p != m]
    assert changed == [m.index for m in mixed if m.kind != "plain"] and len(changed) == 15 + 3 + 6


def test_mix_is_the_same_for_the_same_seed_and_differs_for_another():
    def picks(seed):
        schedule = soak_schedule(400, VOICES, ("mp3",), SENTENCES, seed=seed)
        return [(r.index, r.kind, r.seed, r.bad) for r in schedule if r.kind != "plain"]

    assert picks(1) == picks(1)
    assert picks(1) != picks(2)


def test_bad_requests_take_every_case_in_turn():
    schedule = soak_schedule(1600, VOICES, ("mp3",), SENTENCES, seed=0,
                             mix=SoakMix(leave=0, bad=0.01, seeded=0))
    bad = [r.bad for r in schedule if r.bad]
    names = [case.name for case in BAD_CASES]
    assert bad == names * 2
    assert names == ["unknown_voice", "unknown_model", "bad_format", "speed_out_of_range",
                     "empty_input", "missing_input", "input_too_long", "malformed_json"]


@pytest.mark.parametrize("shares", [(0.5, 0.3, 0.3), (-0.1, 0, 0), (0, 1.5, 0)])
def test_mix_shares_out_of_bounds_are_refused(shares):
    with pytest.raises(ValueError, match="0 to 1"):
        SoakMix(*shares)
