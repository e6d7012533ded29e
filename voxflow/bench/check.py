"""``bench run --check N``: is the audio reproducible? No timing, only content.

Each case is run N times in turn (run 1 of every case, then run 2, ...), one request at a time,
every request with the same seed each run (``seed + text index``). A run's fingerprint is the
sha256 of its decoded audio: every text's float32 samples in order, each preceded by its sample
count, so moving audio between texts changes the hash. Runs of a case that differ are reported
with the texts whose audio differs.
"""

from __future__ import annotations

import hashlib
import struct
from dataclasses import asdict, dataclass, field

import numpy as np

from voxflow.bench.adapters import Adapter
from voxflow.bench.client import fetch
from voxflow.bench.errors import BenchError
from voxflow.bench.runner import Case, SweepPlan, http_client


@dataclass
class CheckRun:
    """One run of one case: the hash of all its audio and of each text's audio."""

    case: str
    run: int
    sha256: str
    samples: int
    text_sha256: list[str] = field(default_factory=list)


@dataclass
class CheckReport:
    runs: list[CheckRun]

    def differing(self) -> dict[str, list[int]]:
        """Case name -> indices of texts whose audio differs between runs (only cases that do)."""
        out: dict[str, list[int]] = {}
        for case in dict.fromkeys(r.case for r in self.runs):
            runs = [r for r in self.runs if r.case == case]
            texts = [i for i in range(len(runs[0].text_sha256))
                     if len({r.text_sha256[i] for r in runs}) > 1]
            if texts:
                out[case] = texts
        return out

    def to_dict(self) -> dict:
        return {"runs": [asdict(r) for r in self.runs], "differing": self.differing()}


def audio_digest(audio: np.ndarray) -> str:
    """sha256 of (N,) float32 samples, little-endian."""
    return hashlib.sha256(np.asarray(audio, "<f4").tobytes()).hexdigest()


async def run_check(adapter: Adapter, cases: list[Case], runs: int, plan: SweepPlan,
                    say=lambda line: None) -> CheckReport:
    """Run every case `runs` times in turn and fingerprint each run.

    Raises:
        BenchError: a request failed (a check needs every request's audio).
    """
    seed = 0 if plan.seed is None else plan.seed
    report = CheckReport([])
    async with http_client(1) as client:
        for run in range(runs):
            for case in cases:
                whole = hashlib.sha256()
                entry = CheckRun(case.name, run, "", 0)
                for t, text in enumerate(case.texts):
                    result = await fetch(client, adapter, text, t, seed + t, plan.timeout_s,
                                         keep_audio=True)
                    if not result.timeline.ok or result.audio is None:
                        raise BenchError(f"--check: request for text {t} of case {case.name} "
                                         f"failed: {result.timeline.error or 'no audio'}")
                    whole.update(struct.pack("<Q", result.audio.size))
                    whole.update(np.asarray(result.audio, "<f4").tobytes())
                    entry.text_sha256.append(audio_digest(result.audio))
                    entry.samples += result.audio.size
                entry.sha256 = whole.hexdigest()
                say(f"{case.name}  run {run + 1}/{runs}  sha256 {entry.sha256}  "
                    f"{entry.samples} samples")
                report.runs.append(entry)
    return report
