"""The verdicts of ``voxflow bench soak``: what a soak must show, each PASS or FAIL.

- lost: every valid request (plain, seeded, leaving) ended in 200 with a complete body (a
  leaving client: 200 and its first chunk of audio before it left). Requests not sent because
  ``--max-seconds`` ran out are not lost, but named.
- 5xx: no answer of the soak or of the solo re-sends has a 5xx status.
- bad requests: each got the 4xx status and error ``code`` of its `voxflow.bench.soak_bad`
  case, in OpenAI's error shape.
- seeded identity: after the soak, each seeded request is sent again alone, one at a time
  (`resend_seeded`), and its body must equal the soak's byte for byte. Where they differ, the
  record also says whether the decoded samples are the same (`voxflow.bench.decode`), to tell a
  container difference from an audio one.
- RSS flat: the median RSS of the last quarter of the time samples is within `FLAT_TOLERANCE`
  (5%) of the second quarter's (the first quarter is the warm-up: allocator pools and caches
  filling).
"""

from __future__ import annotations

import hashlib
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import httpx
import numpy as np

from voxflow.bench.decode import DecodeError, make_decoder
from voxflow.bench.soak import MIB, RssSample, SoakRecord, SoakRequest, send

FLAT_TOLERANCE = 0.05
PCM_RATE = 24_000  # the rate of `pcm` unless the request asks for another (the soak does not)


@dataclass(frozen=True)
class Verdict:
    """One criterion's outcome: `passed`, None when there was nothing to judge (SKIP)."""

    name: str
    passed: bool | None
    detail: str

    def line(self) -> str:
        """``PASS lost: 0 of 9,500 valid requests``."""
        word = "SKIP" if self.passed is None else "PASS" if self.passed else "FAIL"
        return f"{word} {self.name}: {self.detail}"


async def resend_seeded(client: httpx.AsyncClient, url: str, schedule: Sequence[SoakRequest],
                        record: SoakRecord, timeout_s: float) -> None:
    """Send each seeded request that the soak answered again, alone, and compare the bodies;
    appends one entry per request to ``record.solo``: ``index``, ``status``, ``error``,
    ``identical`` (bytes), and for a body that differs ``same_samples`` (decoded audio equal,
    None when undecodable) and ``max_abs_diff``."""
    for index in sorted(record.bodies):
        req = schedule[index]
        solo = bytearray()
        result = await send(client, url, req, timeout_s, keep=solo)
        entry: dict[str, Any] = {"index": index, "status": result["status"],
                                 "error": result["error"], "seconds": result["seconds"]}
        soak = record.bodies[index]
        entry["identical"] = result["error"] is None and bytes(solo) == soak
        if result["error"] is None and not entry["identical"]:
            entry.update(compare_samples(req.fmt, soak, bytes(solo)))
            entry["sha256"] = [hashlib.sha256(soak).hexdigest(), result["sha256"]]
        record.solo.append(entry)


def compare_samples(fmt: str, a: bytes, b: bytes) -> dict[str, Any]:
    """Decode two bodies of format `fmt` and compare their samples.

    Returns:
        ``same_samples`` (True when equal in count and value; None when either body cannot be
        decoded), ``samples`` (the two counts) and ``max_abs_diff`` (over the common length, in
        full scale 1.0; None when undecodable).
    """
    try:
        x, y = _decoded(fmt, a), _decoded(fmt, b)
    except DecodeError:
        return {"same_samples": None, "samples": None, "max_abs_diff": None}
    common = min(len(x), len(y))
    diff = float(np.max(np.abs(x[:common] - y[:common]))) if common else 0.0
    return {"same_samples": len(x) == len(y) and diff == 0.0, "samples": [len(x), len(y)],
            "max_abs_diff": diff}


def _decoded(fmt: str, data: bytes) -> np.ndarray:
    decoder = make_decoder(fmt, PCM_RATE)
    return np.concatenate([decoder.feed(data), decoder.finish()])


def lost_verdict(record: SoakRecord, scheduled: int) -> Verdict:
    """Valid requests that did not end in 200 with their body (see the module docstring)."""
    valid = [r for r in record.results if r["kind"] != "bad"]
    lost = [r for r in valid if r["error"]]
    unsent = scheduled - len(record.results)
    detail = f"{len(lost):,} of {len(valid):,} valid requests"
    if lost:
        detail += " (" + ", ".join(f"#{r['index']} {r['error']}" for r in lost[:5])
        detail += ", ...)" if len(lost) > 5 else ")"
    if unsent:
        detail += f"; {unsent:,} not sent (time limit)"
    return Verdict("lost", not lost, detail)


def server_error_verdict(record: SoakRecord) -> Verdict:
    """No 5xx status in the soak or in the solo re-sends."""
    answers = record.results + record.solo
    errors = [r for r in answers if (r["status"] or 0) >= 500]
    detail = f"{len(errors):,} of {len(answers):,} answers"
    if errors:
        detail += " (" + ", ".join(f"#{r['index']} {r['status']}" for r in errors[:5]) + ")"
    return Verdict("5xx", not errors, detail)


def bad_verdict(record: SoakRecord) -> Verdict:
    """Every bad request answered with its case's 4xx and code in OpenAI's error shape."""
    bad = [r for r in record.results if r["kind"] == "bad"]
    if not bad:
        return Verdict("bad requests", None, "none sent")
    wrong = [r for r in bad if r["error"]]
    detail = f"{len(bad) - len(wrong):,} of {len(bad):,} answered with their 4xx and code"
    if wrong:
        detail += " (" + ", ".join(f"#{r['index']} {r['bad']}: {r['error']} {r['code']}"
                                   for r in wrong[:5]) + ")"
    return Verdict("bad requests", not wrong, detail)


def identity_verdict(record: SoakRecord) -> Verdict:
    """Every seeded request's soak body equals its solo body byte for byte."""
    if not record.solo:
        return Verdict("seeded identity", None, "no seeded request answered")
    differ = [e for e in record.solo if not e["identical"]]
    detail = f"{len(record.solo) - len(differ):,} of {len(record.solo):,} byte-identical alone"
    if differ:
        detail += " (" + ", ".join(
            f"#{e['index']} " + (e["error"] or f"same samples: {e.get('same_samples')}")
            for e in differ[:5]) + ")"
    return Verdict("seeded identity", not differ, detail)


def flatness(samples: Sequence[RssSample]) -> tuple[float, float] | None:
    """(second quarter's, last quarter's) median RSS in bytes over the readable time samples
    in time order, or None when fewer than 4 are readable."""
    values = [s.rss_bytes for s in sorted(samples, key=lambda s: s.t_s)
              if s.rss_bytes is not None]
    quarter = len(values) // 4
    if quarter == 0:
        return None
    return (statistics.median(values[quarter:2 * quarter]),
            statistics.median(values[len(values) - quarter:]))


def rss_verdict(record: SoakRecord, tolerance: float = FLAT_TOLERANCE) -> Verdict:
    """The last quarter's median RSS within `tolerance` (a fraction) of the second's."""
    medians = flatness(record.samples)
    if medians is None:
        return Verdict("RSS flat", False, f"{len(record.samples)} samples, fewer than 4 readable")
    second, last = medians
    change = last / second - 1
    detail = (f"median of the last quarter {last / MIB:,.0f} MiB, second quarter "
              f"{second / MIB:,.0f} MiB ({change:+.1%}, limit ±{tolerance:.0%})")
    return Verdict("RSS flat", abs(change) <= tolerance, detail)


def soak_verdicts(record: SoakRecord, scheduled: int) -> list[Verdict]:
    """Every verdict of the module docstring, in its order (`scheduled`: requests planned)."""
    return [lost_verdict(record, scheduled), server_error_verdict(record), bad_verdict(record),
            identity_verdict(record), rss_verdict(record)]
