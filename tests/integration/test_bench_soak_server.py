"""`voxflow bench soak` end to end: a short soak against the real joe server, RSS from its
/metrics (the test server runs in this process, so it is this process's RSS)."""

from __future__ import annotations

import json

import pytest

from voxflow.cli import main

pytestmark = pytest.mark.integration


def test_twelve_request_soak_records_rss_at_start_and_every_six(joe_server, tmp_path, capsys):
    out = tmp_path / "soak.json"
    assert main(["bench", "soak", "--url", joe_server.url, "--requests", "12", "--every", "6",
                 "--clients", "2", "--interval", "0.5", "--settle", "0.5",
                 "--out", str(out)]) == 0
    captured = capsys.readouterr()
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
