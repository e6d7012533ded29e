"""`benchmarks/gpu/nanocodec.sh --dry-run` (issue 12): the GPU script runs its whole path on the
CPU with the tiny decoder and writes one JSON with every figure the GPU run reports (streamed vs
one-shot per chunk, TTFA, copies and syncs per chunk, replay vs eager), labelled a dry run."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.skipif(shutil.which("bash") is None or shutil.which("timeout") is None,
                    reason="needs bash and coreutils timeout")
def test_dry_run_writes_one_json_with_every_figure(tmp_path: Path) -> None:
    env = dict(os.environ, PY=sys.executable)
    proc = subprocess.run(["bash", str(ROOT / "benchmarks/gpu/nanocodec.sh"), "--dry-run",
                           "--out-dir", str(tmp_path)], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "--device cuda --graphs --check-replay" in proc.stdout  # the GPU command, printed
    doc = json.loads((tmp_path / "nanocodec_gpu.json").read_text())
    assert doc["decoder"] == "tiny" and doc["facts"]["dry_run"] is True
    # one stream and 2 streams per step at every chunk; no graph modes on a CPU
    assert set(doc["streamed"]) == {f"eager:{c}{b}" for c in (1, 2, 4, 8) for b in ("", "x2")}
    for row in doc["streamed"].values():
        assert row["host_device_copies"] == 0 and row["host_syncs"] == 0
        assert row["rtfx"] > 0 and row["ttfa_ms"] > 0 and row["ratio_to_one_shot"] > 0
    assert all(s == "eager: device is cpu" for s in doc["graphs"]["status"].values())
    assert set(doc["replay_vs_eager"]) == {"1", "2", "4", "8", "1x2", "2x2", "4x2", "8x2"}
    assert all(r["bit_identical"] and r["rerun_bit_identical"] and not r["captured"]
               for r in doc["replay_vs_eager"].values())
