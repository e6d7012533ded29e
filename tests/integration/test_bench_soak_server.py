"""`voxflow bench soak` end to end: a short soak against the real joe server, RSS from its
/metrics (the test server runs in this process, so it is this process's RSS)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from voxflow.bench.soak_bad import BAD_CASES
from voxflow.cli import main

pytestmark = pytest.mark.integration


def test_twelve_request_soak_records_rss_at_start_and_every_six(joe_server, tmp_path, capsys):
    out = tmp_path / "soak.json"
    code = main(["bench", "soak", "--url", joe_server.url, "--requests", "12", "--every", "6",
                 "--clients", "2", "--interval", "0.5", "--settle", "0.5",
                 "--leave-fraction", "0", "--bad-fraction", "0", "--seeded-fraction", "0",
                 "--out", str(out)])
    captured = capsys.readouterr()
    # 6 s from a cold server: its RSS may still be climbing (the flatness verdict is for long
    # soaks), so the exit status must only agree with the verdicts printed
    verdicts = captured.out.splitlines()[-5:]
    assert verdicts[:2] == ["PASS lost: 0 of 12 valid requests", "PASS 5xx: 0 of 12 answers"]
    assert verdicts[4].startswith(("PASS RSS flat", "FAIL RSS flat"))
    assert code == (1 if verdicts[4].startswith("FAIL") else 0)
    assert "after 6 requests" in captured.err and "after 12 requests" in captured.err
    rows = captured.out.splitlines()
    assert rows[0].split() == ["requests", "seconds", "RSS", "MiB", "vs", "start"]
    assert [row.split()[0] for row in rows[1:4]] == ["0", "6", "12"]
    assert rows[4].startswith("12 + at rest")

    record = json.loads(out.read_text())
    soak = record["soak"]
    assert soak["source"].endswith("/metrics process_resident_memory_bytes")
    assert soak["start"]["requests"] == 0 and soak["start"]["rss_bytes"] > 50e6
    assert [c["requests"] for c in soak["checkpoints"]] == [6, 12]
    assert soak["at_rest"]["requests"] == 12 and soak["at_rest"]["rss_bytes"] > 50e6
    assert all(c["rss_bytes"] > 50e6 for c in soak["checkpoints"])
    assert len(soak["samples"]) >= 2 and all(s["rss_bytes"] > 0 for s in soak["samples"])
    assert soak["errors_by_kind"] == {}
    requests = soak["requests"]
    assert len(requests) == 12 and all(r["status"] == 200 and r["bytes"] > 1000
                                       for r in requests)
    assert {r["model"] for r in requests} == {"piper"}
    assert {r["fmt"] for r in requests} <= {"mp3", "opus", "aac", "wav"}
    assert record["voices"] == [["piper", "joe"]]


def test_soak_with_leaving_bad_and_seeded_requests_passes_every_verdict(joe_server, tmp_path,
                                                                       capsys):
    """32 short requests, 2 clients: 4 leave after their first chunk, 8 are bad (each case of
    the rotation once, so the server's status and code are checked against docs/api.md), and
    4 are seeded and sent again alone, their bodies equal byte for byte."""
    out = tmp_path / "soak.json"
    replies = Path(__file__).resolve().parents[2] / "benchmarks" / "data" / "replies.txt"
    code = main(["bench", "soak", "--url", joe_server.url, "--requests", "32", "--every", "16",
                 "--clients", "2", "--interval", "0.2", "--settle", "0",
                 "--sentences", str(replies), "--leave-fraction", "0.125",
                 "--bad-fraction", "0.25", "--seeded-fraction", "0.125", "--out", str(out)])
    printed = capsys.readouterr().out
    verdicts = printed.splitlines()[-5:]
    assert [line.split(":")[0] for line in verdicts] == [
        "PASS lost", "PASS 5xx", "PASS bad requests", "PASS seeded identity", "PASS RSS flat"]
    assert code == 0
    assert verdicts[0] == "PASS lost: 0 of 24 valid requests"
    assert verdicts[2] == "PASS bad requests: 8 of 8 answered with their 4xx and code"
    assert verdicts[3] == "PASS seeded identity: 4 of 4 byte-identical alone"

    record = json.loads(out.read_text())
    requests = record["soak"]["requests"]
    left = [r for r in requests if r["kind"] == "leave"]
    assert len(left) == 4 and all(r["left"] and r["status"] == 200 for r in left)
    bad = {r["bad"]: (r["status"], r["code"]) for r in requests if r["kind"] == "bad"}
    assert bad == {c.name: (c.status, c.code) for c in BAD_CASES}
    solo = record["soak"]["solo"]
    assert len(solo) == 4 and all(e["identical"] and e["status"] == 200 for e in solo)
    assert [v["passed"] for v in record["verdicts"]] == [True] * 5
    assert record["mix"] == {"leave": 0.125, "bad": 0.25, "seeded": 0.125}
