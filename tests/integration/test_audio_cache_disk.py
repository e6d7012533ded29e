"""The audio cache's disk tier on a real `voxflow serve` process (default Piper voice joe): a
seeded response stored before a restart is a hit after it, with the same bytes, counted on
``/metrics``; a changed lexicon deletes its file; a folder that cannot be used stops start-up
with one line."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from serve_process import Server

from voxflow.bench.arms import free_port
from voxflow.bench.scrape import metric

pytestmark = pytest.mark.integration

URL = "/v1/audio/speech"


def post(url: str, **fields) -> httpx.Response:
    body = {"model": "piper", "voice": "joe", "input": "Kept on disk.", "seed": 21,
            "response_format": "wav", **fields}
    response = httpx.post(url + URL, json=body, timeout=60)
    assert response.status_code == 200, response.text
    return response


def wait_for_files(url: str, n: int) -> None:
    """Until the disk tier holds `n` entries (it writes from a background thread)."""
    deadline = time.monotonic() + 20
    while metric(url, "voxflow_audio_cache_disk_entries") != n:
        assert time.monotonic() < deadline, metric(url, "voxflow_audio_cache_disk_entries")
        time.sleep(0.05)


def stop(server: Server) -> None:
    server.signal(signal.SIGTERM)
    assert server.wait(60) == 0, server.log.read_text()[-3000:]


def test_a_response_stored_before_a_restart_is_a_hit_after_it(tmp_path):
    disk = tmp_path / "audio-cache"
    sets = (f"cache.disk_directory={disk}", f"server.lexicons_dir={tmp_path / 'lexicons'}")
    first = Server(tmp_path, *sets)
    try:
        whole = post(first.url, stream=False)
        streamed = post(first.url, stream=True)
        assert whole.headers["x-voxflow-cache"] == streamed.headers["x-voxflow-cache"] == "miss"
        wait_for_files(first.url, 2)
        on_disk = sorted(disk.glob("*.vfc"))
        assert len(on_disk) == 2
        assert metric(first.url, "voxflow_audio_cache_disk_bytes") == sum(
            p.stat().st_size for p in on_disk)
    finally:
        stop(first)

    again = Server(tmp_path, *sets)  # the same folder, a new process
    try:
        url = again.url
        assert metric(url, "voxflow_audio_cache_disk_entries") == 2
        assert metric(url, "voxflow_audio_cache_entries") == 0  # memory starts empty
        hit = post(url, stream=False)
        assert hit.headers["x-voxflow-cache"] == "hit"
        assert hit.content == whole.content and len(hit.content) > 1000
        assert hit.headers["x-sample-rate"] == whole.headers["x-sample-rate"] == "22050"
        assert hit.headers["content-type"] == "audio/wav"
        streamed_hit = post(url, stream=True)
        assert streamed_hit.headers["x-voxflow-cache"] == "hit"
        assert streamed_hit.content == streamed.content
        assert metric(url, "voxflow_audio_cache_hits_total", model="piper") == 2
        assert metric(url, "voxflow_audio_cache_disk_hits_total", model="piper") == 2
        assert metric(url, "voxflow_audio_cache_misses_total", model="piper") == 0
        assert metric(url, "voxflow_audio_cache_bytes") == len(whole.content) + len(
            streamed.content)  # both promoted to memory
        assert post(url, stream=False).headers["x-voxflow-cache"] == "hit"  # from memory now
        assert metric(url, "voxflow_audio_cache_disk_hits_total", model="piper") == 2

        # a changed lexicon deletes its file from the disk tier too
        lexicon = {"entries": [{"word": "Kept", "respelling": "Keppt"}]}
        assert httpx.put(f"{url}/v1/audio/lexicons/spelled", json=lexicon,
                         timeout=30).status_code in (200, 201)
        assert post(url, stream=False, lexicon="spelled").headers["x-voxflow-cache"] == "miss"
        wait_for_files(url, 3)
        assert len(list(disk.glob("*.vfc"))) == 3
        lexicon["entries"][0]["respelling"] = "Kepped"
        assert httpx.put(f"{url}/v1/audio/lexicons/spelled", json=lexicon,
                         timeout=30).status_code in (200, 201)
        assert metric(url, "voxflow_audio_cache_disk_entries") == 2
        assert sorted(disk.glob("*.vfc")) == on_disk
    finally:
        stop(again)


def test_a_cache_folder_that_cannot_be_made_stops_start_up_in_one_line(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    result = subprocess.run(
        [sys.executable, "-m", "voxflow", "serve", "--port", str(free_port()),
         "--set", f"cache.disk_directory={blocker / 'cache'}"],
        capture_output=True, text=True, timeout=120)
    assert result.returncode == 2, result.stderr[-3000:]
    line = f"voxflow: cache.disk_directory: {Path(blocker / 'cache')} cannot be used: "
    assert line in result.stderr, result.stderr[-3000:]
    assert "Traceback" not in result.stderr
