"""How the bench talks to each kind of server: the request to send and how to decode the answer.

Three engines, measured by the same client (`voxflow.bench.client`):
- ``openai``: ``POST {url}/v1/audio/speech`` with the OpenAI fields (voxflow, or any server that
  speaks the OpenAI speech API). ``pcm`` takes its rate from ``X-Sample-Rate`` when the server
  sends it, else from `Target.sample_rate` (OpenAI's own pcm is 24 kHz). With
  `Target.stream_field` off the body has no ``stream`` key at all, exactly what the official
  ``openai`` client's plain ``audio.speech.create()`` sends, so the server's default is measured.
- ``piper-http``: piper-tts's own server (``python -m piper.http_server``), ``POST
  {url}/synthesize`` with ``{"text": ...}``; it answers a whole WAV file, never streams and has
  no seed.
- ``wyoming``: a Wyoming text-to-speech server (Home Assistant's protocol: voxflow's
  ``--wyoming`` listener, wyoming-piper) at ``tcp://HOST:PORT``; each request is one TCP
  connection, sent as `voxflow.bench.wyoming_client` says; ready once ``describe`` gets an
  ``info`` within Home Assistant's 1 s. No seed, no format (16-bit PCM), no extras.

Pass-through `extras` are added to the JSON body, but never replace a field the harness owns
(`owned_fields`): the harness's value wins and `dropped_extras` names what was ignored.
"""

from __future__ import annotations

from typing import Any, Protocol

import httpx

from voxflow.bench.decode import make_decoder
from voxflow.bench.target import OPENAI_PCM_RATE, Target
from voxflow.bench.wyoming_client import describe, host_port

ENGINES = ("openai", "piper-http", "wyoming")
__all__ = ["ENGINES", "OPENAI_PCM_RATE", "Adapter", "HttpAdapter", "Target", "make_adapter"]


class Adapter(Protocol):
    """What every engine's adapter has: its target, and how to tell the server is ready."""

    target: Target
    seeded: bool
    """Whether the server honours a seed (same seed -> same audio)."""

    def owned_fields(self) -> frozenset[str]: ...

    async def ready(self, client: httpx.AsyncClient) -> bool:
        """Whether the server answers its health check now (connection errors -> False)."""
        ...

    async def info(self, client: httpx.AsyncClient) -> dict[str, Any]:
        """What the server says about itself, for the report."""
        ...


class HttpAdapter(Adapter, Protocol):
    """An engine spoken over HTTP: one request per text, the answer's body decoded as audio."""

    def request(self, text: str, seed: int | None) -> tuple[str, dict[str, Any]]:
        """The URL and JSON body of one request for `text`."""
        ...

    def decoder(self, response: httpx.Response):
        """A fresh `voxflow.bench.decode` decoder for this response's body."""
        ...


def dropped_extras(adapter: Adapter) -> list[str]:
    """The pass-through extras the harness ignores because it owns those fields."""
    return sorted(set(adapter.target.extras) & adapter.owned_fields())


def _body(adapter: Adapter, owned: dict[str, Any]) -> dict[str, Any]:
    extras = {k: v for k, v in adapter.target.extras.items() if k not in adapter.owned_fields()}
    return {**extras, **owned}


async def _get_json(client: httpx.AsyncClient, url: str,
                    headers: dict[str, str] | None = None) -> Any:
    try:
        r = await client.get(url, timeout=10, headers=headers)
        return r.json() if r.status_code == 200 else {"status_code": r.status_code}
    except (httpx.HTTPError, ValueError) as exc:
        return {"error": f"{type(exc).__name__}: {exc}"}


class OpenAIAdapter:
    """The OpenAI speech API (`POST /v1/audio/speech`); health is `GET /health` == 200."""

    seeded = True

    def __init__(self, target: Target):
        self.target = target

    def owned_fields(self) -> frozenset[str]:
        return frozenset({"model", "voice", "input", "response_format", "stream",
                          "stream_format", "seed"})

    def request(self, text: str, seed: int | None) -> tuple[str, dict[str, Any]]:
        t = self.target
        owned: dict[str, Any] = {"model": t.model, "voice": t.voice, "input": text,
                                 "response_format": t.fmt}
        if t.stream_field:
            owned["stream"] = t.stream
        if t.sse:
            owned["stream_format"] = "sse"
        if seed is not None:
            owned["seed"] = seed
        return f"{t.url}/v1/audio/speech", _body(self, owned)

    def decoder(self, response: httpx.Response):
        rate = int(response.headers.get("x-sample-rate", self.target.sample_rate))
        return make_decoder(self.target.fmt, rate, sse=self.target.sse)

    async def ready(self, client: httpx.AsyncClient) -> bool:
        try:
            return (await client.get(f"{self.target.url}/health", timeout=5)).status_code == 200
        except httpx.HTTPError:
            return False

    async def info(self, client: httpx.AsyncClient) -> dict[str, Any]:
        url = self.target.url
        return {"health": await _get_json(client, f"{url}/health"),
                "models": await _get_json(client, f"{url}/v1/models", self.target.headers)}


class PiperHttpAdapter:
    """piper-tts's HTTP server (`POST /synthesize`, a whole WAV); ready once `GET /` answers."""

    seeded = False

    def __init__(self, target: Target):
        self.target = target

    def owned_fields(self) -> frozenset[str]:
        return frozenset({"text"})

    def request(self, text: str, seed: int | None) -> tuple[str, dict[str, Any]]:
        return f"{self.target.url}/synthesize", _body(self, {"text": text})

    def decoder(self, response: httpx.Response):
        return make_decoder("wav", 0)

    async def ready(self, client: httpx.AsyncClient) -> bool:
        try:
            return (await client.get(f"{self.target.url}/", timeout=5)).status_code < 500
        except httpx.HTTPError:
            return False

    async def info(self, client: httpx.AsyncClient) -> dict[str, Any]:
        info = await _get_json(client, f"{self.target.url}/info")
        if isinstance(info, dict):
            info.pop("last", None)  # the previous utterance's phonemes: noise in a report
        return {"info": info}


class WyomingAdapter:
    """A Wyoming server at ``tcp://HOST:PORT``; ready once ``describe`` gets its ``info``
    within Home Assistant's 1 s (the httpx client of the protocol is not used)."""

    seeded = False

    def __init__(self, target: Target):
        host_port(target.url)  # ValueError now rather than at the first request
        self.target = target

    def owned_fields(self) -> frozenset[str]:
        return frozenset()

    async def ready(self, client: httpx.AsyncClient) -> bool:
        return await describe(self.target.url) is not None

    async def info(self, client: httpx.AsyncClient) -> dict[str, Any]:
        info = await describe(self.target.url)
        if info is None:
            return {"error": "no info within 1 s"}
        return {"tts": [{"name": p.name, "version": p.version, "installed": p.installed,
                         "supports_synthesize_streaming": p.supports_synthesize_streaming,
                         "voices": [v.name for v in p.voices]} for p in info.tts]}


def make_adapter(target: Target) -> Adapter:
    """The adapter for `target.engine`.

    Raises:
        ValueError: unknown engine; a wyoming URL that is not ``tcp://HOST:PORT``.
    """
    if target.engine == "openai":
        return OpenAIAdapter(target)
    if target.engine == "piper-http":
        return PiperHttpAdapter(target)
    if target.engine == "wyoming":
        return WyomingAdapter(target)
    raise ValueError(f"unknown engine {target.engine!r}; engines: {', '.join(ENGINES)}")
