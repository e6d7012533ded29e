"""``voxflow bench soak``: N requests of mixed traffic, and the server's RSS over time.

The traffic is a fixed schedule (`soak_schedule`), the same for the same seed and voice list:
request ``i`` goes to model ``i mod M`` (the server's models, sorted, so each gets an equal
share), a voice of that model, a format, streamed or whole, and one or two consecutive lines of
the sentences file, each drawn by ``random.Random(seed)``. On top of that plain traffic, a
`SoakMix` picks exact shares of the requests (drawn from the same seed, disjoint): clients that
leave mid-stream (streamed; the client reads the first chunk of audio and closes the
connection), bad requests (a rotation of `voxflow.bench.soak_bad.BAD_CASES`: unknown voice or
model, bad format, speed out of range, empty, missing or too long input, malformed JSON), and
seeded requests (a ``seed`` field; their bodies are kept, to be compared with the same request
sent alone after the soak, `voxflow.bench.soak_checks`). `clients` workers keep that many
requests in flight (closed loop) until all are sent or `max_seconds` have passed; the body is
read to its end and counted, not decoded (client CPU stays low on a shared machine).

RSS (`voxflow.bench.memory`) is sampled before the first request ("start"), after every
`every` completed requests (checkpoints: with other requests still in flight, so they include
the memory those runs are using), every `interval_s` seconds (the time series), after the last
request, and `settle_s` seconds after that ("at rest": what the server keeps with nothing in
flight). Both bounds, count and time, are checked when the options are parsed.
"""

from __future__ import annotations

import asyncio
import hashlib
import random
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import httpx

from voxflow.bench.client import error_kind
from voxflow.bench.memory import RssSource
from voxflow.bench.report import render_table
from voxflow.bench.soak_bad import BAD_CASES, BY_NAME, bad_body, error_code
from voxflow.bench.target import NO_STORE

MAX_REQUESTS = 100_000
MAX_CLIENTS = 64
MIB = 1 << 20


@dataclass(frozen=True)
class SoakRequest:
    """One request of the schedule (``text`` is one or two lines of the sentences file).

    ``seed``: sent as the body's ``seed`` (None: no seed); ``leave``: the client closes the
    connection after the first chunk of audio (always streamed); ``bad``: the name of the
    `voxflow.bench.soak_bad.BAD_CASES` entry that spoils the body (None: a valid request).
    """

    index: int
    model: str
    voice: str
    fmt: str
    stream: bool
    text: str
    seed: int | None = None
    leave: bool = False
    bad: str | None = None

    @property
    def kind(self) -> str:
        """``bad``, ``leave``, ``seeded`` or ``plain``."""
        if self.bad is not None:
            return "bad"
        if self.leave:
            return "leave"
        return "plain" if self.seed is None else "seeded"

    def body(self) -> dict[str, Any]:
        """The JSON body of the valid request (a bad one is spoiled from this)."""
        body: dict[str, Any] = {"model": self.model, "voice": self.voice, "input": self.text,
                                "response_format": self.fmt, "stream": self.stream}
        if self.seed is not None:
            body["seed"] = self.seed
        return body


@dataclass(frozen=True)
class SoakMix:
    """Shares (0 to 1, at most 1 together) of the schedule's requests that are not plain.

    Each share is an exact count, ``round(share * n)`` requests, not a probability.
    """

    leave: float = 0.05
    bad: float = 0.01
    seeded: float = 0.02

    def __post_init__(self) -> None:
        shares = (self.leave, self.bad, self.seeded)
        if any(not 0 <= x <= 1 for x in shares) or sum(shares) > 1:
            raise ValueError(f"shares must be 0 to 1 and at most 1 together, got {shares}")

    def counts(self, n: int) -> tuple[int, int, int]:
        """(leaving, bad, seeded) request counts of a schedule of `n`."""
        return round(self.leave * n), round(self.bad * n), round(self.seeded * n)


PLAIN = SoakMix(0.0, 0.0, 0.0)


@dataclass(frozen=True)
class SoakPlan:
    """How much traffic, how fast, and how often RSS is read (validated by the CLI)."""

    requests: int
    clients: int = 4
    every: int = 120
    interval_s: float = 2.0
    max_seconds: float = 3600.0
    timeout_s: float = 120.0
    settle_s: float = 3.0
    max_input_chars: int = 4096  # the server's server.max_input_chars (a bad input exceeds it)


@dataclass
class RssSample:
    """RSS in bytes (None: unreadable) `t_s` seconds after the start, `requests` completed."""

    t_s: float
    requests: int
    rss_bytes: float | None


@dataclass
class SoakRecord:
    """Everything one soak measured (`to_dict` is the JSON record's ``soak``)."""

    source: str
    start: RssSample | None = None
    checkpoints: list[RssSample] = field(default_factory=list)
    samples: list[RssSample] = field(default_factory=list)
    results: list[dict[str, Any]] = field(default_factory=list)
    elapsed_s: float = 0.0
    stopped_by_time: bool = False
    at_rest: RssSample | None = None
    bodies: dict[int, bytes] = field(default_factory=dict)  # seeded requests' audio, by index
    solo: list[dict[str, Any]] = field(default_factory=list)  # their answers sent alone

    def errors(self) -> dict[str, int]:
        return dict(Counter(r["error"] for r in self.results if r["error"]))

    def to_dict(self) -> dict[str, Any]:
        by = Counter((r["model"], r["fmt"], r["error"] or "ok") for r in self.results)
        kinds = Counter((r["kind"], r["error"] or "ok") for r in self.results)
        return {
            "source": self.source, "elapsed_s": self.elapsed_s,
            "stopped_by_time": self.stopped_by_time,
            "start": asdict(self.start) if self.start else None,
            "checkpoints": [asdict(c) for c in self.checkpoints],
            "at_rest": asdict(self.at_rest) if self.at_rest else None,
            "samples": [asdict(s) for s in self.samples],
            "errors_by_kind": self.errors(),
            "counts": [{"model": m, "format": f, "outcome": o, "n": n}
                       for (m, f, o), n in sorted(by.items())],
            "kinds": [{"kind": k, "outcome": o, "n": n} for (k, o), n in sorted(kinds.items())],
            "requests": self.results,
            "solo": self.solo,
        }


def soak_schedule(
    n: int,
    voices: Sequence[tuple[str, str]],
    formats: Sequence[str],
    sentences: Sequence[str],
    seed: int = 0,
    mix: SoakMix = SoakMix(),
) -> list[SoakRequest]:
    """The `n` requests of a soak, in sending order (see the module docstring).

    Args:
        voices: (model, voice) pairs, e.g. from ``GET /v1/audio/voices``.
        formats: response formats to mix (e.g. mp3, opus, aac, wav).
        sentences: lines to speak; a request speaks line k, or lines k and k + 1 (wrapping).
        mix: the shares of leaving, bad and seeded requests; the plain traffic (models, voices,
            formats, texts) is the same whatever the mix.
    Raises:
        ValueError: no voices, formats or sentences.
    """
    if not voices or not formats or not sentences:
        raise ValueError("a soak needs at least one voice, one format and one sentence")
    by_model: dict[str, list[str]] = {}
    for model, voice in voices:
        by_model.setdefault(model, []).append(voice)
    models = sorted(by_model)
    rng = random.Random(seed)
    schedule = []
    for i in range(n):
        model = models[i % len(models)]
        voice = rng.choice(sorted(by_model[model]))
        fmt = rng.choice(list(formats))
        stream = rng.random() < 0.5
        k, count = rng.randrange(len(sentences)), rng.choice((1, 2))
        text = " ".join(sentences[(k + j) % len(sentences)] for j in range(count))
        schedule.append(SoakRequest(i, model, voice, fmt, stream, text))
    return _mixed(schedule, mix, seed)


def _mixed(schedule: list[SoakRequest], mix: SoakMix, seed: int) -> list[SoakRequest]:
    """`schedule` with `mix`'s shares made leaving, bad and seeded (disjoint, drawn from
    `seed` by a generator of their own); bad requests take `BAD_CASES` in turn by index."""
    leaving, bad, seeded = mix.counts(len(schedule))
    rng = random.Random(f"soak-mix:{seed}")
    order = rng.sample(range(len(schedule)), len(schedule))
    bad_set = set(order[:bad])
    leave_set = set(order[bad:bad + leaving])
    seeded_set = set(order[bad + leaving:bad + leaving + seeded])
    out, turn = [], 0
    for req in schedule:
        if req.index in bad_set:
            req = replace(req, bad=BAD_CASES[turn % len(BAD_CASES)].name)
            turn += 1
        elif req.index in leave_set:
            req = replace(req, leave=True, stream=True)
        elif req.index in seeded_set:
            req = replace(req, seed=rng.randrange(1 << 31))
        out.append(req)
    return out


async def server_voices(client: httpx.AsyncClient, url: str,
                        models: Sequence[str] | None = None) -> list[tuple[str, str]]:
    """(model, voice) pairs the server lists at ``GET /v1/audio/voices``, of `models` if given;
    voice aliases (entries with ``alias_of``, e.g. OpenAI's ``alloy``) are left out, so each
    real voice is sent once.

    Raises:
        ValueError: the listing is unreadable, or no voice of the wanted models is listed.
    """
    try:
        response = await client.get(f"{url}/v1/audio/voices", timeout=10)
        data = response.json()["data"]
        pairs = [(str(v["model"]), str(v["id"])) for v in data if "alias_of" not in v]
    except (httpx.HTTPError, ValueError, KeyError, TypeError) as exc:
        raise ValueError(f"cannot read {url}/v1/audio/voices: {exc}") from None
    if models:
        pairs = [p for p in pairs if p[0] in models]
    if not pairs:
        raise ValueError(f"{url}/v1/audio/voices lists no voice"
                         + (f" of {', '.join(models)}" if models else ""))
    return pairs


async def send(client: httpx.AsyncClient, url: str, req: SoakRequest, timeout_s: float,
               max_input_chars: int = 4096, keep: bytearray | None = None) -> dict[str, Any]:
    """Send one request and read its body (a leaving client: its first chunk); never raises
    for a failed request.

    Args:
        max_input_chars: the server's ``server.max_input_chars``, which a too-long bad input
            exceeds.
        keep: if given, the body's bytes are appended to it (a seeded request's audio).
    Returns:
        The request's record: its fields (text as ``chars``), ``kind`` (`SoakRequest.kind`),
        ``status`` (HTTP status or None), ``error`` (None, ``http_<status>``,
        ``bad_http_<status>`` or ``bad_shape`` for a bad request answered otherwise than its
        `BadCase` says, or a `voxflow.bench.client` error kind), ``bytes`` of body,
        ``seconds`` from sending to the end of the body (or to leaving), ``left`` for a leaving
        client that left, ``code`` (a bad request's error code) and ``sha256`` (with `keep`).
    """
    record: dict[str, Any] = {"index": req.index, "kind": req.kind, "model": req.model,
                              "voice": req.voice, "fmt": req.fmt, "stream": req.stream,
                              "chars": len(req.text), "status": None, "error": None, "bytes": 0}
    if req.seed is not None:
        record["seed"] = req.seed
    start = time.perf_counter()
    try:
        if req.bad is not None:
            await _send_bad(client, url, req, timeout_s, max_input_chars, record)
        else:
            await _send_speech(client, url, req, timeout_s, record, keep)
    except httpx.HTTPError as exc:
        record["error"] = error_kind(exc)
    record["seconds"] = time.perf_counter() - start
    if keep is not None and record["error"] is None:
        record["sha256"] = hashlib.sha256(keep).hexdigest()
    return record


async def _send_speech(client: httpx.AsyncClient, url: str, req: SoakRequest, timeout_s: float,
                       record: dict[str, Any], keep: bytearray | None) -> None:
    """A valid request: read the body to its end, or a leaving client's first chunk."""
    # no-store: the soak measures synthesis, and its seeded identity compares two syntheses
    async with client.stream("POST", f"{url}/v1/audio/speech", json=req.body(),
                             headers=NO_STORE, timeout=timeout_s) as response:
        record["status"] = response.status_code
        async for data in response.aiter_bytes():
            record["bytes"] += len(data)
            if keep is not None:
                keep += data
            if req.leave and response.status_code == 200 and data:
                record["left"] = True  # closing the unread response drops the connection
                break
    if record["status"] != 200:
        record["error"] = f"http_{record['status']}"
    elif record["bytes"] == 0:
        record["error"] = "no_audio"


async def _send_bad(client: httpx.AsyncClient, url: str, req: SoakRequest, timeout_s: float,
                    max_input_chars: int, record: dict[str, Any]) -> None:
    """A bad request: its answer must be its case's 4xx and code, in OpenAI's error shape."""
    assert req.bad is not None
    case = BY_NAME[req.bad]
    record["bad"] = req.bad
    response = await client.post(
        f"{url}/v1/audio/speech", content=bad_body(req.bad, req.body(), max_input_chars),
        headers={"Content-Type": "application/json"}, timeout=timeout_s)
    record["status"], record["bytes"] = response.status_code, len(response.content)
    record["code"] = error_code(response.content)
    if response.status_code != case.status:
        record["error"] = f"bad_http_{response.status_code}"
    elif record["code"] != case.code:
        record["error"] = "bad_shape" if record["code"] is None else "bad_code"


async def run_soak(
    client: httpx.AsyncClient,
    url: str,
    schedule: Sequence[SoakRequest],
    plan: SoakPlan,
    source: RssSource,
    say: Callable[[str], None] = lambda line: None,
) -> SoakRecord:
    """Send `schedule` with `plan.clients` in flight, reading RSS as the module docstring says.

    Stops sending when `plan.max_seconds` have passed (requests in flight finish).
    """
    record = SoakRecord(source.describe())
    t0 = time.monotonic()

    async def sample() -> RssSample:
        return RssSample(time.monotonic() - t0, len(record.results), await source.read())

    start = record.start = await sample()
    say(checkpoint_line(start, start, 0))
    next_index = iter(range(len(schedule)))
    finished = asyncio.Event()

    async def sampler() -> None:
        while not finished.is_set():
            record.samples.append(await sample())
            try:
                await asyncio.wait_for(finished.wait(), plan.interval_s)
            except TimeoutError:
                pass

    async def worker() -> None:
        for i in next_index:
            if time.monotonic() - t0 > plan.max_seconds:
                record.stopped_by_time = True
                return
            req = schedule[i]
            keep = bytearray() if req.kind == "seeded" else None
            record.results.append(await send(client, url, req, plan.timeout_s,
                                             plan.max_input_chars, keep))
            if keep is not None and record.results[-1]["error"] is None:
                record.bodies[i] = bytes(keep)
            if len(record.results) % plan.every == 0:
                point = await sample()
                record.checkpoints.append(point)
                say(checkpoint_line(point, start, sum(record.errors().values())))

    sampling = asyncio.create_task(sampler())
    try:
        await asyncio.gather(*(worker() for _ in range(min(plan.clients, len(schedule)))))
    finally:
        finished.set()
        await sampling
    if not record.checkpoints or record.checkpoints[-1].requests != len(record.results):
        record.checkpoints.append(await sample())
    record.samples.append(record.checkpoints[-1])
    record.elapsed_s = time.monotonic() - t0
    if plan.settle_s > 0:  # nothing in flight: what the server keeps, not what runs need
        await asyncio.sleep(plan.settle_s)
        record.at_rest = await sample()
        say(f"at rest {plan.settle_s:g} s after the last request: RSS "
            f"{_mib(record.at_rest.rss_bytes)} MiB")
    return record


def _mib(value: float | None) -> str:
    return "-" if value is None else f"{value / MIB:,.0f}"


def checkpoint_line(point: RssSample, start: RssSample, errors: int) -> str:
    """``after 120 requests (95 s): RSS 1,888 MiB (+1,177 MiB since start), 0 failed``."""
    if point is start:
        return f"start: RSS {_mib(point.rss_bytes)} MiB"
    delta = (None if point.rss_bytes is None or start.rss_bytes is None
             else point.rss_bytes - start.rss_bytes)
    sign = "" if delta is None or delta < 0 else "+"
    return (f"after {point.requests} requests ({point.t_s:.0f} s): RSS {_mib(point.rss_bytes)} "
            f"MiB ({sign}{_mib(delta)} MiB since start), {errors} failed")


def soak_table(record: SoakRecord) -> str:
    """One row per checkpoint: requests done, seconds, RSS and its change since the start."""
    start, rest = record.start, record.at_rest

    def row(label: str, point: RssSample) -> list[str]:
        base = start.rss_bytes if start is not None else None
        delta = None if base is None or point.rss_bytes is None else point.rss_bytes - base
        return [label, f"{point.t_s:.0f}", _mib(point.rss_bytes),
                "-" if delta is None else f"{delta / MIB:+,.0f}"]

    rows = [row(str(p.requests), p) for p in [p for p in (start,) if p] + record.checkpoints]
    rows += [row(f"{rest.requests} + at rest", rest)] if rest is not None else []
    peak = max((s.rss_bytes for s in record.samples if s.rss_bytes is not None), default=None)
    table = render_table(["requests", "seconds", "RSS MiB", "vs start"], rows)
    errors = ", ".join(f"{k}: {v}" for k, v in record.errors().items()) or "none"
    kinds = Counter(r["kind"] for r in record.results)
    left = sum(bool(r.get("left")) for r in record.results)
    mix = (f"{kinds['plain']} plain, {kinds['seeded']} seeded, {kinds['leave']} leaving "
           f"({left} left mid-stream), {kinds['bad']} bad")
    return (f"{table}\npeak RSS {_mib(peak)} MiB over {len(record.samples)} samples; "
            f"{len(record.results)} requests in {record.elapsed_s:.0f} s ({mix}); "
            f"errors: {errors}")
