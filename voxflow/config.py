"""Typed settings for a deployment: one YAML file under `configs/` plus CLI overrides.

`load_settings(path, overrides)` is the only place configuration is read. It validates every
field once (unknown keys are errors) and each model's `options` against that family's own
settings type, so a bad config stops start-up with a message naming the field, e.g.
``models[0].options.intra_op_threads: Input should be greater than or equal to 1``.
"""

from __future__ import annotations

import ipaddress
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    field_validator,
    model_validator,
)

from voxflow.api_keys import ENV_VAR, ApiKeysError, collect_api_keys, key_problem
from voxflow.config_suggest import did_you_mean
from voxflow.models.registry import family_settings_type

# An Origin header's value: scheme://host[:port], nothing after it.
_ORIGIN = re.compile(r"[a-zA-Z][a-zA-Z0-9+.-]*://[^/?#\s]+")


OPENAI_MODELS = ("tts-1", "tts-1-hd", "gpt-4o-mini-tts")
"""The model names OpenAI's speech API takes; the built-in default serves them as Piper."""

OPENAI_VOICES = (
    "alloy", "ash", "ballad", "coral", "echo", "fable", "nova", "onyx", "sage", "shimmer", "verse",
    "marin", "cedar",
)
"""The voice names OpenAI's speech API takes (platform.openai.com/docs/guides/text-to-speech,
2026); the built-in default reads them all with joe. Pipecat refuses any other voice name before
it sends a request, so each also resolves on every model (`voxflow.engine.aliases`)."""


class ConfigError(ValueError):
    """A configuration file or override is invalid; the message names the field."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ServerSettings(_Strict):
    """HTTP server settings."""

    host: str = Field(
        "127.0.0.1",
        description="Address the HTTP server binds to (`0.0.0.0` listens on all interfaces).",
    )
    port: int = Field(8000, ge=0, le=65535, description="TCP port the HTTP server listens on.")
    log_level: Literal["debug", "info", "warning", "error"] = Field(
        "info", description="Lowest level of log lines written."
    )
    max_input_chars: int = Field(
        4096, ge=1, le=1_000_000,
        description="Longest `input` a speech request may have, in characters (OpenAI's limit).",
    )
    drain_timeout_s: float = Field(
        30.0, ge=0,
        description="On SIGTERM or SIGINT, seconds the requests in flight (HTTP, SSE, "
        "WebSocket, Wyoming) get to finish while new ones are refused (503 `shutting_down`) "
        "and `/health` says `draining`; those still running then end (docs/operations.md, "
        "\"Stopping\"). Under Ray Serve, each replica's graceful shutdown timeout.",
    )
    max_buffered_audio_s: float = Field(
        10.0, ge=0.1, le=3600.0,
        description="Seconds of a request's audio that synthesis may run ahead of what its "
        "client has read; beyond it the request's synthesis waits (the scheduler neither runs "
        "nor counts it) until the client reads on. Bounds the memory a client that stops "
        "reading can hold (docs/operations.md, \"Slow and stalled clients\").",
    )
    client_stall_timeout_s: float = Field(
        60.0, ge=0.1, le=86400.0,
        description="A client that reads none of its streamed audio for this many seconds "
        "(every protocol) has its request cancelled and logged (`client_stalled`); its "
        "response ends incomplete.",
    )
    stream_by_default: bool = Field(
        True,
        description="A speech request without a `stream` field streams its audio (chunked, as "
        "it is produced), as OpenAI's endpoint does; `false`: it gets the whole file. A "
        "request's own `stream` always wins.",
    )
    unknown_fields: Literal["ignore", "refuse"] = Field(
        "ignore",
        description="A speech request's top-level fields that voxflow does not know (LibreChat "
        "sends `backend`, other apps their own): `ignore` serves the request and names them in "
        "the `X-Voxflow-Ignored` header and the access line; `refuse` answers 400 "
        "`unknown_parameter`. A known field of the wrong type is a 400 either way.",
    )
    trusted_proxies: list[str] = Field(
        ["127.0.0.1", "::1"],
        description="Addresses (or CIDR ranges) of reverse proxies whose `X-Forwarded-For` and "
        "`X-Forwarded-Proto` are believed: the access log's `client` is then the address they "
        "forward, else the peer's. `[]` believes none; `[\"*\"]` believes anyone (only when "
        "nothing but the proxy can reach the server). docs/operations.md, \"Behind a reverse "
        "proxy\".",
    )
    max_body_bytes: int = Field(
        1_048_576, ge=1_024, le=1_000_000_000,
        description="Largest JSON request body (`POST /v1/audio/speech` and the other JSON "
        "routes), in bytes: a 413 `payload_too_large` from `Content-Length` before the body is "
        "read, or as soon as a chunked body passes it (the rest is read and dropped, never "
        "kept). Voice uploads have their own limit.",
    )
    max_voice_upload_bytes: int = Field(
        20_000_000, ge=1_000, le=1_000_000_000,
        description="Largest `POST /v1/audio/voices` body (the prompt recording or feature "
        "file plus the form fields), in bytes; a larger upload is refused with a 413 before it "
        "is read further.",
    )
    lexicons_dir: Path | None = Field(
        None,
        description="Folder of the pronunciation lexicons `PUT /v1/audio/lexicons/{name}` "
        "saves (one `NAME.json` each, read back at start-up; docs/api.md, Pronunciation "
        "lexicons). null = `$XDG_DATA_HOME/voxflow/lexicons` (`~/.local/share/...` without "
        "it).",
    )
    stream_clause_wait_s: float = Field(
        0.5, ge=0.05, le=60.0,
        description="`WS /v1/audio/speech/stream`: seconds without new text after which the "
        "text received is spoken up to its last clause or sentence punctuation (`, ; : ! ? .`), "
        "though no later text has shown its sentence complete. A complete sentence is spoken "
        "at once, without this wait.",
    )
    cors_origins: list[str] = Field(
        default_factory=list,
        description="Browser origins (`https://app.example.com`, `http://localhost:5173`, or "
        "`*` for any) allowed to call the API from a web page: CORS preflights are answered "
        "and responses carry `Access-Control-Allow-Origin`. Empty (the default): CORS is off.",
    )

    api_keys: list[SecretStr] = Field(
        default_factory=list,
        description="API keys: every route but `/health` (and the API docs pages) then needs "
        "`Authorization: Bearer KEY` with one of them, else a 401 (docs/api.md, API keys). "
        f"Merged once at start-up with the keys of `api_keys_file` and of `{ENV_VAR}` "
        "(comma-separated). None anywhere (the default): the API is open, which suits "
        "127.0.0.1; `voxflow serve` warns when it listens on another address without keys. "
        "A key is 1-256 printable ASCII characters without spaces; keys are never logged "
        "or shown.",
    )
    api_keys_file: Path | None = Field(
        None,
        description="A file of API keys added to `api_keys`: one key per line, blank lines "
        "and lines starting with `#` skipped. Read once at start-up; a missing or unreadable "
        "file, or one without a key, stops start-up.",
    )
    listings_public: bool = Field(
        False,
        description="With API keys set, serve the read-only listings (`GET /v1/models`, "
        "`/v1/models/{id}`, `/v1/audio/voices`, `/v1/audio/models`) without a key. Open WebUI "
        "reads voices and models without its key and silently offers OpenAI's six voices when "
        "refused: turn this on for it. No effect without keys.",
    )
    metrics_public: bool = Field(
        False,
        description="With API keys set, serve `GET /metrics` without a key. Off by default: "
        "the metrics show traffic, models and voices, and Prometheus can send the key "
        "(`authorization: {credentials: KEY}` in the scrape config). No effect without keys.",
    )

    @field_validator("api_keys", mode="before")
    @classmethod
    def _keys_list(cls, value: object) -> object:
        if not isinstance(value, list | tuple):  # never quote it: it may be a key
            raise ValueError(
                "must be a list of keys: write [KEY1, KEY2] (YAML: a list; --set: "
                "'server.api_keys=[KEY]'), or use api_keys_file or "
                f"the {ENV_VAR} environment variable"
            )
        return value

    @field_validator("api_keys")
    @classmethod
    def _keys(cls, keys: list[SecretStr]) -> list[SecretStr]:
        for index, key in enumerate(keys):
            problem = key_problem(key.get_secret_value())
            if problem is not None:
                raise ValueError(f"key {index}: {problem}")
        return keys

    @field_validator("cors_origins", mode="before")
    @classmethod
    def _origins_list(cls, value: object) -> object:
        if not isinstance(value, list | tuple):
            got = "a string" if isinstance(value, str) else repr(value)
            raise ValueError(
                f"must be a list of origins, not {got}: write "
                '["https://app.example.com"] (YAML: a list; --set: '
                """'server.cors_origins=["https://app.example.com"]')"""
            )
        return value

    @field_validator("cors_origins")
    @classmethod
    def _origins(cls, origins: list[str]) -> list[str]:
        for origin in origins:
            if origin != "*" and not _ORIGIN.fullmatch(origin):
                raise ValueError(
                    f"{origin!r} is not an origin: write scheme://host[:port] with no path or "
                    "trailing slash (what browsers send in Origin), or * for any origin"
                )
        return origins

    @field_validator("trusted_proxies")
    @classmethod
    def _proxies(cls, proxies: list[str]) -> list[str]:
        for proxy in proxies:
            try:
                if proxy != "*":
                    ipaddress.ip_network(proxy, strict=False)
            except ValueError:
                raise ValueError(f"{proxy!r} is not an IP address or CIDR range (or *)") from None
        return proxies


class EngineSettings(_Strict):
    """Engine-wide scheduling and admission settings."""

    max_inflight_requests: int = Field(
        32, ge=1, description="Requests whose segments may be in stage queues at once."
    )
    max_queued_requests: int = Field(
        128, ge=0,
        description="Requests waiting for an in-flight slot; past in-flight + queued the server "
        "answers 429.",
    )
    request_timeout_s: float = Field(
        120.0, gt=0,
        description="Seconds of synthesis from submission to the last chunk; time spent "
        "waiting on a client that is not reading is added to it (engine/stream.py). Past it "
        "the request fails: 504 before headers, an incomplete body (or an SSE error event) "
        "after.",
    )
    retry_after_s: int = Field(
        1, ge=1, description="Seconds a client is told to wait (`Retry-After`) with a 429."
    )
    warmup: bool = Field(
        True,
        description="Run one synthesis per model at start-up; `/health` is ready only after it.",
    )
    isolate_seeded: bool = Field(
        True,
        description="Seeded requests batch only with themselves, so their bytes never depend "
        "on batch-mates (batch composition moves float rounding at a row's edges). Kept by a "
        "test, not a speed figure: seeded requests served beside others equal each sent "
        "alone, byte for byte (unit tests; `bench soak`'s seeded identity).",
    )
    # Deadline scheduling (see engine/scheduler.py).
    ttfa_target_s: float = Field(
        1.0, ge=0,
        description="Deadline scheduling: a new request's first segment is due this many "
        "seconds after arrival; also the first-audio goal that `bench` goodput and capacity "
        "count against. Kept by the sweep of 0, 1 and 2 s (closed loop, 2 cores): 0 made "
        "every waiting first segment overdue at once and 17% of requests stalled at "
        "concurrency 8 against none at 1; throughput did not move (docs/benchmarks.md).",
    )
    continuation_lead_s: float = Field(
        0.5, ge=0,
        description="Deadline scheduling: a stream's next segment is due this many seconds "
        "before its audio so far has played out. 0.5 with `late_first_yields` (was 1.0 "
        "without it): open-loop capacity 2.92 requests/s against 2.74 and closed-loop TTFA "
        "p50 at concurrency 16 0.88 s against 2.48 s, `bench compare --runs 3` "
        "(docs/benchmarks.md); lead 0.5 alone, without the two tiers, stalled at 16 in flight.",
    )
    running_dry_s: float = Field(
        1.0, ge=0,
        description="Deadline scheduling: a stream with less audio than this left to play is "
        "running dry and goes ahead of every first segment already late (scheduler rule 2); "
        "at least `continuation_lead_s`. Without this tier, late first segments outranked "
        "streams already playing under overload: 17% of requests stalled, about 1 s each "
        "(closed loop, concurrency 16).",
    )
    late_first_yields: bool = Field(
        True,
        description="Deadline scheduling: a first segment past its due (its listener's first "
        "audio already late) yields to first segments still on time, so a burst costs the "
        "service level of the fewest listeners; under saturation a late first audio then "
        "waits until the load falls (docs/architecture.md). false: it keeps its place by due. "
        "Kept by the same A/B as `continuation_lead_s`: first audio p50 at concurrency 16 "
        "0.78-0.88 s against 2.37-2.66 s, but p95 10.9-19.6 s against 3.4-4.7 s.",
    )

    @model_validator(mode="after")
    def _check_deadlines(self) -> EngineSettings:
        if self.running_dry_s < self.continuation_lead_s:
            raise ValueError(
                f"running_dry_s ({self.running_dry_s}) must be at least continuation_lead_s "
                f"({self.continuation_lead_s}): a stream due must count as running dry")
        return self
    memory_headroom_mb: int | None = Field(
        400, ge=0,
        description="Memory budget: resident memory (MB, 10**6 bytes) allowed above what the "
        "models' loads added (weights, voices, front ends). Python itself and the model runs' "
        "working sets live in it: a run waits while the runs in progress would need more than "
        "is left, and a run that starts over the budget ends by handing ONNX Runtime's idle "
        "arena memory back (docs/architecture.md, Memory). null = no budget.",
    )


class ModelSettings(_Strict):
    """One served model: a name clients use, its family, and the family's own options."""

    name: str = Field(min_length=1, description="The `model` name clients ask for.")
    family: str = Field(
        min_length=1, description="Model family implementing it (`piper`, `kokoro`)."
    )
    # Raw here; replaced by the family's validated settings object in `load_settings`.
    options: Any = Field(
        None, description="The family's own settings (below); omitted fields take defaults."
    )
    aliases: list[str] = Field(
        default_factory=list,
        description="Other `model` names that mean this model, e.g. OpenAI's `tts-1`, "
        "`tts-1-hd`, `gpt-4o-mini-tts`; listed by `/v1/models` with `alias_of`. A name may "
        "be one model's name or alias only.",
    )
    voice_aliases: dict[str, str] = Field(
        default_factory=dict,
        description="Other `voice` names for this model's voices, alias: voice (e.g. "
        "`alloy: joe`); listed by `/v1/audio/voices` with `alias_of`. Checked at start-up, "
        "once the voices are loaded: an alias must name a voice of this model and must not "
        "be one.",
    )

    lexicon: str | None = Field(
        None,
        description="The pronunciation lexicon (a saved one's name) requests of this model use "
        "when they name none (`lexicon` in the request; `\"\"` there asks for none). "
        "Checked at start-up: the lexicon must be saved (docs/api.md, Pronunciation lexicons).",
    )
    voice_lexicons: dict[str, str] = Field(
        default_factory=dict,
        description="Per voice, voice: lexicon, the default lexicon of requests with that "
        "voice (wins over `lexicon`). Checked at start-up, once the voices are loaded.",
    )

    @field_validator("aliases")
    @classmethod
    def _alias_names(cls, aliases: list[str]) -> list[str]:
        for alias in aliases:
            if not alias.strip():
                raise ValueError("a model alias must not be empty")
        repeated = sorted({a for a in aliases if aliases.count(a) > 1})
        if repeated:
            raise ValueError(f"repeated model aliases: {', '.join(repeated)}")
        return aliases

    @field_validator("voice_aliases")
    @classmethod
    def _voice_alias_names(cls, aliases: dict[str, str]) -> dict[str, str]:
        for alias, voice in aliases.items():
            if not alias.strip() or not voice.strip():
                raise ValueError(f"voice alias {alias!r}: {voice!r}: names must not be empty")
        return aliases

    @field_validator("family")
    @classmethod
    def _known_family(cls, family: str) -> str:
        family_settings_type(family)  # raises ValueError naming the known families
        return family


WYOMING_PORT = 10200
"""Home Assistant's convention for Wyoming services (wyoming-piper's default)."""


class WyomingSettings(BaseModel):
    """Where and whether `voxflow serve` answers Home Assistant's Wyoming protocol."""

    model_config = ConfigDict(extra="forbid")

    enabled: bool = Field(
        False, description="Serve the Wyoming protocol beside HTTP (`voxflow serve --wyoming`)."
    )
    host: str = Field(
        "127.0.0.1",
        description="Address the Wyoming server binds to. Wyoming has no authentication: "
        "another address than loopback lets anyone who reaches it use the voices (the server "
        "warns).",
    )
    port: int = Field(
        WYOMING_PORT, ge=0, le=65535,
        description="TCP port of the Wyoming server (10200 is Home Assistant's convention; 0 "
        "picks a free one).",
    )
    max_event_bytes: int = Field(
        65_536, ge=1024, le=16 * 1024 * 1024,
        description="Largest data or payload part of one client event, in bytes; a larger one "
        "is answered with an `error` event and the connection closed.",
    )
    zeroconf: bool = Field(
        False, description="Announce the server on the local network as "
        "`_wyoming._tcp.local.` (needs `pip install 'voxflow[zeroconf]'`), so Home Assistant "
        "finds it; withdrawn when the server stops."
    )


class JobsSettings(_Strict):
    """Long-form jobs (`POST /v1/audio/jobs`, `voxflow speak --long`; docs/api.md)."""

    enabled: bool = Field(
        False, description="Serve the long-form job routes under `/v1/audio/jobs` (needs "
        "`jobs.directory`)."
    )
    directory: Path | None = Field(
        None, description="Folder that holds one sub-folder per job (its `job.json` and audio "
        "segments); jobs left unfinished there resume when the server starts."
    )
    max_chars: int = Field(
        1_000_000, ge=1, le=100_000_000,
        description="Most characters of one job's input; more is a 413 `job_too_large`.",
    )
    max_jobs: int = Field(
        16, ge=1, le=100_000,
        description="Most jobs kept at once (any state); one more is a 429 `too_many_jobs` "
        "until one is deleted.",
    )
    disk_quota_bytes: int = Field(
        2_000_000_000, ge=1,
        description="Most bytes all jobs' files may take: while they take this much or more, "
        "a new job is refused with a 507 `quota_exceeded` and a running job fails with it "
        "before its next segment.",
    )
    segment_chars: int = Field(
        400, ge=50, le=4096,
        description="A chapter is cut into pieces of about this many characters (at paragraph "
        "then sentence ends); each is one engine request and one segment file on disk.",
    )
    quiet_s: float = Field(
        0.25, ge=0, le=60,
        description="Seconds the engine must go without an interactive request before a "
        "job's work runs again (`voxflow.engine.foreground`). Between a client's back-to-back "
        "requests a job's run would otherwise slip in, and the next request would wait for it "
        "(benchmarks/jobs_ttfa.sh).",
    )

    @model_validator(mode="after")
    def _needs_directory(self) -> JobsSettings:
        if self.enabled and self.directory is None:
            raise ValueError("jobs.enabled needs jobs.directory")
        return self


class CacheSettings(_Strict):
    """The audio cache of ``POST /v1/audio/speech`` (`voxflow.server.audio_cache`)."""

    enabled: bool = Field(
        True,
        description="Keep the bodies of speech responses whose audio is fixed by the request "
        "(seeded, or a family whose audio does not vary: docs/api.md, Audio cache) and answer "
        "the same request again from memory (`X-Voxflow-Cache: hit`).",
    )
    max_bytes: int = Field(
        64 * 2**20, ge=0,
        description="Bytes of response bodies the cache holds at most (64 MiB); the least "
        "recently used go first. Counted in the memory budget (`engine.memory_headroom_mb` is "
        "on top of it). 0 stores nothing.",
    )
    max_entry_bytes: int = Field(
        4 * 2**20, ge=1,
        description="Largest response body stored, in bytes (4 MiB: about 2 minutes of 16 kHz "
        "WAV); a larger response is sent and not kept.",
    )
    disk_directory: Path | None = Field(
        None,
        description="Folder of the cache's disk tier (docs/api.md, Audio cache): every stored "
        "response is also written there (one file each, atomically), a response not in memory "
        "is answered from it, and it is read back at start-up, so the cache survives a "
        "restart. One server process per folder (refused with Ray Serve, whose replicas would "
        "share it). Created if missing; a folder that cannot be written stops start-up. "
        "null = memory only.",
    )
    disk_max_bytes: int = Field(
        1 << 30, ge=1,
        description="Bytes of files the disk tier holds at most (1 GiB), each file counted "
        "whole (body and header); the least recently used go first. Not in the memory budget. "
        "Only with `disk_directory`.",
    )

    @model_validator(mode="after")
    def _entry_fits(self) -> CacheSettings:
        if self.max_entry_bytes > self.max_bytes > 0:
            raise ValueError(
                f"max_entry_bytes ({self.max_entry_bytes}) must be at most max_bytes "
                f"({self.max_bytes}): an entry that size could never be kept")
        if self.disk_directory is not None and self.max_entry_bytes > self.disk_max_bytes:
            raise ValueError(
                f"max_entry_bytes ({self.max_entry_bytes}) must be at most disk_max_bytes "
                f"({self.disk_max_bytes}): an entry that size could never be kept on disk")
        return self


class Settings(_Strict):
    """The whole deployment."""

    server: ServerSettings = Field(ServerSettings(), description="HTTP server settings.")
    engine: EngineSettings = Field(
        EngineSettings(), description="Engine-wide scheduling and admission settings."
    )
    models: list[ModelSettings] = Field(
        min_length=1, description="The served models; a file that names none serves Piper."
    )
    ray: dict[str, Any] = Field(
        default_factory=dict,
        description="Scale-out on Ray Serve (`voxflow serve --ray`, docs/scale-out.md): "
        "replicas, autoscaling and Ray's queue. The Ray layer owns the section "
        "(`voxflow.ray.settings`): every command validates it at start-up; the plain server "
        "ignores it.",
    )
    wyoming: WyomingSettings = Field(
        WyomingSettings(),
        description="Home Assistant's Wyoming protocol beside HTTP (docs/clients.md, Home "
        "Assistant).",
    )
    jobs: JobsSettings = Field(
        JobsSettings(), description="Long-form jobs: a whole book in, audio files out "
        "(docs/api.md, Long-form jobs)."
    )
    cache: CacheSettings = Field(
        CacheSettings(),
        description="The audio cache of `POST /v1/audio/speech` (docs/api.md, Audio cache).",
    )

    @model_validator(mode="after")
    def _unique_names(self) -> Settings:
        names = [m.name for m in self.models]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"model names must be unique, repeated: {', '.join(dupes)}")
        owner = {m.name: f"the name of models[{i}]" for i, m in enumerate(self.models)}
        for i, model in enumerate(self.models):
            for alias in model.aliases:
                if alias in owner:
                    raise ValueError(
                        f"models[{i}].aliases: '{alias}' (model '{model.name}') is already "
                        f"{owner[alias]}"
                    )
                owner[alias] = f"an alias of models[{i}] ('{model.name}')"
        return self


def _set_dotted(tree: dict, dotted: str, value: Any) -> None:
    node: Any = tree
    parts = dotted.split(".")
    for part in parts[:-1]:
        if isinstance(node, list):
            node = node[int(part)]
        else:
            node = node.setdefault(part, {})
    last = parts[-1]
    if isinstance(node, list):
        node[int(last)] = value
    else:
        node[last] = value


def parse_override(text: str) -> tuple[str, Any]:
    """Parse ``a.b.c=VALUE`` (VALUE read as YAML: numbers, booleans, null, strings).

    Raises:
        ConfigError: when there is no ``=`` or the key is empty.
    """
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise ConfigError(f"override '{text}' must look like section.field=value")
    return key.strip(), yaml.safe_load(value)


def format_validation_error(
    err: ValidationError, prefix: str = "", schema: type[BaseModel] | None = None
) -> str:
    """``invalid configuration: PATH: MESSAGE; ...`` for each error of `err`, each path under
    `prefix` (e.g. ``models[0].options.workers``). With the `schema` that was validated, an
    unknown key also names the valid key closest to it (``; did you mean 'port'?``,
    `voxflow.config_suggest`)."""
    lines = []
    for e in err.errors():
        loc = prefix
        for part in e["loc"]:
            loc += f"[{part}]" if isinstance(part, int) else (f".{part}" if loc else str(part))
        hint = ""
        if schema is not None and e["type"] == "extra_forbidden":
            hint = did_you_mean(schema, e["loc"])
        lines.append(f"{loc or '(root)'}: {e['msg']}{hint}")
    return "invalid configuration: " + "; ".join(lines)


def load_settings(
    path: str | Path | None,
    overrides: dict[str, Any] | None = None,
    environ: Mapping[str, str] | None = None,
) -> Settings:
    """Read, override and validate a deployment's settings.

    Args:
        path: YAML file; None means built-in defaults (one Piper model with the joe voice,
            served also as OpenAI's model names with every OpenAI voice name read by joe).
        overrides: dotted keys to values, applied after the file (``server.port`` -> 9000).
        environ: the environment `VOXFLOW_API_KEYS` is read from (default: `os.environ`).

    Returns:
        The settings; ``server.api_keys`` holds every key of the deployment (those of
        ``server.api_keys_file`` and of ``VOXFLOW_API_KEYS`` merged in, `voxflow.api_keys`).

    Raises:
        ConfigError: missing file, bad YAML, any invalid field (the message names it), or an
            unusable API key source.
    """
    tree: dict[str, Any] = {"models": [{
        "name": "piper", "family": "piper",
        "aliases": list(OPENAI_MODELS), "voice_aliases": dict.fromkeys(OPENAI_VOICES, "joe"),
    }]}
    if path is not None:
        p = Path(path)
        if not p.is_file():
            raise ConfigError(f"config file not found: {p}")
        try:
            loaded = yaml.safe_load(p.read_text()) or {}
        except yaml.YAMLError as exc:
            raise ConfigError(f"config file {p} is not valid YAML: {exc}") from exc
        if not isinstance(loaded, dict):
            raise ConfigError(f"config file {p} must hold a mapping at the top level")
        # A file that names no models serves the default one, like no file at all.
        tree = {"models": tree["models"], **loaded}
    for key, value in (overrides or {}).items():
        try:
            _set_dotted(tree, key, value)
        except (IndexError, ValueError, TypeError) as exc:
            raise ConfigError(f"override '{key}' does not fit the config: {exc}") from exc
    try:
        settings = Settings.model_validate(tree)
    except ValidationError as exc:
        raise ConfigError(format_validation_error(exc, schema=Settings)) from exc
    settings = settings.model_copy(update={
        "server": _with_api_keys(settings.server, os.environ if environ is None else environ),
        "models": [_with_family_options(i, m) for i, m in enumerate(settings.models)],
    })
    for i, model in enumerate(settings.models):
        check = getattr(model.options, "check_engine", None)
        if check is not None:  # a family's options that depend on the engine's settings
            try:
                check(settings.engine)
            except ValueError as exc:
                raise ConfigError(f"invalid configuration: models[{i}].options: {exc}") from exc
    return settings


def _with_api_keys(server: ServerSettings, environ: Mapping[str, str]) -> ServerSettings:
    """`server` with the key file's and the environment's keys merged into `api_keys`."""
    configured = [key.get_secret_value() for key in server.api_keys]
    try:
        keys = collect_api_keys(configured, server.api_keys_file, environ)
    except ApiKeysError as exc:
        raise ConfigError(f"invalid configuration: {exc}") from None
    return server.model_copy(update={"api_keys": [SecretStr(key) for key in keys]})


def _with_family_options(index: int, model: ModelSettings) -> ModelSettings:
    """Validate `model.options` with its family's settings type; errors keep the full path."""
    raw = model.options if model.options is not None else {}
    schema = family_settings_type(model.family)
    try:
        options = schema.model_validate(raw)
    except ValidationError as exc:
        where = f"models[{index}].options"
        raise ConfigError(format_validation_error(exc, where, schema)) from exc
    return model.model_copy(update={"options": options})
