"""`voxflow bench` end to end: the real joe server (small sweep, --check), a deliberately
non-deterministic stand-in server, a compare of stand-in arms, and the idle gate's exit status.

The idle gate reads a fake load source here (a shared CI machine is never reliably idle).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from conftest import QuietLoad

from voxflow.bench import command
from voxflow.bench.arms import free_port
from voxflow.bench.idle import LoadSample
from voxflow.cli import main

pytestmark = pytest.mark.integration

FAKE_SERVER = Path(__file__).with_name("fake_speech_server.py")


class QuietMeteredLoad(QuietLoad):
    """Quiet at the gate; over measured levels, other processes used 12.5% of the CPU the first
    time (so the level is retaken), then 3%."""

    def __init__(self):
        self.levels = 0

    def mark(self) -> object:
        return None

    def since(self, mark: object) -> float:
        self.levels += 1
        return 12.5 if self.levels % 2 else 3.0


class BusyLoad:
    def sample(self) -> LoadSample:
        time.sleep(0.02)
        return LoadSample(90.0)


def start_fake(*flags: str) -> tuple[subprocess.Popen, str]:
    """Run fake_speech_server.py on a free port; returns the process and its URL once healthy."""
    port = free_port()
    proc = subprocess.Popen([sys.executable, str(FAKE_SERVER), str(port), *flags])
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 20
    while True:
        try:
            if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                return proc, url
        except httpx.HTTPError:
            if time.monotonic() > deadline:
                proc.kill()
                raise
            time.sleep(0.05)


@pytest.fixture
def fake_server():
    proc, url = start_fake()
    yield url
    proc.kill()
    proc.wait()


@pytest.fixture
def random_server():
    proc, url = start_fake("--random")
    yield url
    proc.kill()
    proc.wait()


def test_sweep_against_the_real_server(joe_server, quiet, tmp_path, capsys):
    out, audio = tmp_path / "run.json", tmp_path / "audio"
    assert main(["bench", "run", "--url", joe_server.url, "--case", "line", "--concurrency", "1,2",
                 "--warmup", "1", "--out", str(out), "--save-audio-dir", str(audio)]) == 0
    table = capsys.readouterr().out.splitlines()
    assert table[0].split()[:3] == ["case", "conc", "ok/sent"]
    assert table[1].split()[:3] == ["line", "1", "5/5"]
    assert table[2].split()[:3] == ["line", "2", "10/10"]

    record = json.loads(out.read_text())
    levels = record["cases"]["line"]
    assert [lv["concurrency"] for lv in levels] == [1, 2]
    for lv in levels:
        s = lv["repeats"][0]
        assert s["errors"] == 0 and s["ok"] == 5 * lv["concurrency"]
        assert 0 < s["ttfa_p50"] <= s["latency_p50"]
        assert s["audio_s"] > 3 * s["ok"]  # the line is about 4 s of speech
        assert s["audio_s_per_s"] > 0 and s["rtf_p50"] > 0
    assert record["gates"][0]["idle"] and record["busy"] is False
    assert record["machine"]["logical_cores"] >= 1 and "numpy" in record["machine"]["packages"]
    assert record["server"]["info"]["health"]["status"] == "ready"
    assert record["server"]["git"].get("commit")
    assert len(list(audio.rglob("*.wav"))) == 15


def test_check_passes_on_the_real_seeded_server(joe_server, capsys):
    assert main(["bench", "run", "--url", joe_server.url, "--case", "line", "--check", "2",
                 "--seed", "11", "--no-stream"]) == 0
    lines = capsys.readouterr().out.splitlines()
    hashes = [line.split("sha256 ")[1].split()[0] for line in lines if "sha256" in line]
    assert len(hashes) == 2 and hashes[0] == hashes[1]
    assert lines[-1].startswith("identical")


def test_check_passes_on_a_deterministic_server_with_several_texts(fake_server, tmp_path, capsys):
    texts = tmp_path / "texts.txt"
    texts.write_text("One.\n\nTwo words.\nThree short words.\n")
    assert main(["bench", "run", "--url", fake_server, "--sentences", str(texts),
                 "--check", "3"]) == 0
    assert "identical" in capsys.readouterr().out


def test_check_detects_a_non_deterministic_server(random_server, tmp_path, capsys):
    out = tmp_path / "check.json"
    assert main(["bench", "run", "--url", random_server, "--case", "line", "--check", "2",
                 "--out", str(out)]) == 1
    printed = capsys.readouterr().out
    assert "DIFFERENT: case line: runs differ on texts [0]" in printed
    check = json.loads(out.read_text())["check"]
    assert check["differing"] == {"line": [0]}
    assert check["runs"][0]["sha256"] != check["runs"][1]["sha256"]


def test_busy_machine_exits_3_unless_allowed(fake_server, monkeypatch, capsys):
    monkeypatch.setattr(command, "make_load_source", BusyLoad)
    argv = ["bench", "run", "--url", fake_server, "--case", "line", "--concurrency", "1",
            "--warmup", "0", "--idle-timeout", "0.2"]
    assert main(argv) == 3
    assert "not idle after 0 s" in capsys.readouterr().err
    assert main([*argv, "--allow-busy"]) == 0
    assert "BUSY (measuring anyway" in capsys.readouterr().err


def test_compare_rotates_arms_and_always_stops_them(monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(command, "make_load_source", QuietMeteredLoad)
    arm = f"{sys.executable} {FAKE_SERVER} {{port}}"
    out = tmp_path / "compare.json"
    assert main(["bench", "compare", "--arm", f"base={arm}", "--arm", f"head={arm}",
                 "--runs", "2", "--case", "line", "--concurrency", "1,2", "--warmup", "0",
                 "--work-dir", str(tmp_path / "work"), "--out", str(out)]) == 0
    table = capsys.readouterr().out
    assert "base (base)" in table and "head/base" in table
    record = json.loads(out.read_text())
    starts = record["starts"]
    assert [s["arm"] for s in starts] == ["base", "head", "head", "base"]
    for s in starts:
        assert [lv["concurrency"] for lv in s["levels"]["line"]] == [1, 2]
        assert [lv["others_cpu_pct"] for lv in s["levels"]["line"]] == [3.0, 3.0]
        assert [lv["others_cpu_pct"] for lv in s["discarded_levels"]["line"]] == [12.5, 12.5]
        assert len(s["gates"]) == 3  # before the case, and before each retake
        with pytest.raises(httpx.ConnectError):  # every arm was stopped
            httpx.get(f"{s['url']}/health", timeout=2)
    row = record["comparison"]["line"][0]
    assert row["arms"]["head"]["ttfa_p50"]["n"] == 2
    assert row["vs_base"]["head"]["errors"]["verdict"] == "within noise"


def test_open_loop_run_against_the_real_server(joe_server, quiet, tmp_path, capsys):
    out = tmp_path / "open.json"
    assert main(["bench", "run", "--url", joe_server.url, "--case", "line", "--request-rate",
                 "2", "--duration", "3", "--warmup-s", "1", "--slo-ttfa", "30",
                 "--out", str(out)]) == 0
    table = capsys.readouterr().out.splitlines()
    assert table[0].split()[:4] == ["case", "rate", "ok/sent", "goodput"]
    record = json.loads(out.read_text())
    s = record["open_loop"]["runs"][0]["rates"][0]
    assert s["sent"] >= 1 and s["ok"] == s["sent"] and s["errors"] == 0
    assert s["goodput"] == pytest.approx(s["good"] / s["sent"])
    assert 0 < s["ttfa_p50"] <= s["latency_p50"] and s["audio_s_per_s"] > 0


def test_open_loop_compare_reports_capacity_per_arm(monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(command, "make_load_source", QuietLoad)
    arm = f"{sys.executable} {FAKE_SERVER} {{port}}"
    out = tmp_path / "compare.json"
    assert main(["bench", "compare", "--arm", f"base={arm}", "--arm", f"head={arm}",
                 "--runs", "1", "--case", "line", "--request-rate", "4", "--duration", "1",
                 "--warmup-s", "0.5", "--find-capacity", "--capacity-max-probes", "2",
                 "--work-dir", str(tmp_path / "work"), "--out", str(out)]) == 0
    table = capsys.readouterr().out
    assert "capacity req/s" in table and "goodput" in table and "head/base" in table
    record = json.loads(out.read_text())
    assert [s["arm"] for s in record["starts"]] == ["base", "head"]
    line = record["comparison"]["line"]
    # the fake server answers at once: both probes (4 and 8 req/s) pass, capacity 8
    assert line["capacity"]["arms"]["head"]["rate"]["median"] == 8.0
    assert line["capacity"]["vs_base"]["head"]["rate"]["verdict"] == "within noise"
    assert line["rates"][0]["rate"] == 4.0
    assert line["rates"][0]["arms"]["base"]["goodput"]["median"] == 1.0
