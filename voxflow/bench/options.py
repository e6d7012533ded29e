"""The options of ``voxflow bench run`` and ``voxflow bench compare``, validated at parsing.

A bad value (``--repeats 0``, ``--concurrency 1,x``, an unknown ``--case``) is a usage error
(exit 2) before anything is started. The values turn into the typed objects the bench runs on:
`Target`, `Case` list, `SweepPlan`, `IdlePolicy`.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import yaml

from voxflow.audio.formats import FORMATS
from voxflow.bench.adapters import OPENAI_PCM_RATE, Target
from voxflow.bench.idle import IdlePolicy
from voxflow.bench.openloop import CapacitySearch, OpenLoopPlan, Slo
from voxflow.bench.runner import MIN_PER_LEVEL, Case, SweepPlan
from voxflow.bench.target import NO_STORE
from voxflow.wyoming.address import wyoming_address

DATA_DIR = Path(__file__).resolve().parents[2] / "benchmarks" / "data"
CASES = {"line": "case_line.txt", "paragraph": "case_paragraph.txt", "script": "case_script.txt"}
"""``--case`` name -> file in `DATA_DIR`: one line, a five-sentence paragraph, a 20-sentence
script (each file is one request)."""
DEFAULT_SENTENCES = DATA_DIR / "sentences.txt"
DEFAULT_CONCURRENCY = "1,4,8,16"
DEFAULT_IDLE_TIMEOUT_S = 600.0
DEFAULT_WS_WORDS_PER_S = 20.0
API_KEY_ENV = "VOXFLOW_BENCH_API_KEY"  # the key `--api-key` defaults to


def integer(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None


def number(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None


N = TypeVar("N", int, float)


def checked(parse: Callable[[str], N], ok: Callable[[N], bool], words: str) -> Callable[[str], N]:
    """An option type: `parse` the text, then refuse a value that is not `ok` with ``must be
    <words>, got <value>`` (an integer as parsed, a number as given)."""
    def parse_checked(text: str) -> N:
        value = parse(text)
        if not ok(value):
            shown = value if isinstance(value, int) else text
            raise argparse.ArgumentTypeError(f"must be {words}, got {shown}")
        return value
    return parse_checked


positive_int = checked(integer, lambda v: v >= 1, "at least 1")
non_negative_int = checked(integer, lambda v: v >= 0, "0 or more")
max_probes = checked(integer, lambda v: v >= 2, "at least 2")
per_level = checked(integer, lambda v: v >= MIN_PER_LEVEL,
                    f"at least {MIN_PER_LEVEL} (requests per level = this x concurrency)")
positive_float = checked(number, lambda v: v > 0, "more than 0")
non_negative_float = checked(number, lambda v: v >= 0, "0 or more")
fraction = checked(positive_float, lambda v: v <= 1, "more than 0 and at most 1")
"""A number in (0, 1]."""
tolerance = checked(positive_float, lambda v: v < 1, "more than 0 and less than 1")
"""A number in (0, 1)."""
step_factor = checked(positive_float, lambda v: v > 1, "more than 1")
"""A number above 1 (the capacity search's step)."""


def concurrency_list(text: str) -> tuple[int, ...]:
    """``"1,4,8"`` -> (1, 4, 8): positive, no duplicates, in the given order."""
    parts = [p.strip() for p in text.split(",")]
    try:
        levels = tuple(int(p) for p in parts)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"concurrency must be a comma-separated list of positive integers, got {text!r}"
        ) from None
    if not levels or min(levels) < 1:
        raise argparse.ArgumentTypeError(f"every concurrency must be at least 1, got {text!r}")
    if len(set(levels)) != len(levels):
        raise argparse.ArgumentTypeError(f"concurrency levels repeat in {text!r}")
    return levels


def rate_list(text: str) -> tuple[float, ...]:
    """``"2,4.5"`` -> (2.0, 4.5): requests/s, each more than 0, no duplicates, in order."""
    parts = [p.strip() for p in text.split(",")]
    try:
        rates = tuple(float(p) for p in parts)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"request rate must be a comma-separated list of numbers (requests/s), got {text!r}"
        ) from None
    if not all(r > 0 and r != float("inf") for r in rates):
        raise argparse.ArgumentTypeError(f"every request rate must be more than 0, got {text!r}")
    if len(set(rates)) != len(rates):
        raise argparse.ArgumentTypeError(f"request rates repeat in {text!r}")
    return rates


def case_names(text: str) -> list[str]:
    """``"line,script"`` -> ["line", "script"], each a key of `CASES`."""
    names = [n.strip() for n in text.split(",") if n.strip()]
    unknown = [n for n in names if n not in CASES]
    if unknown or not names:
        raise argparse.ArgumentTypeError(
            f"unknown case {', '.join(unknown) or repr(text)}; cases: {', '.join(CASES)}")
    return names


def extra_field(text: str) -> tuple[str, object]:
    """``KEY=VALUE`` with VALUE read as YAML (``speed=1.2`` -> ("speed", 1.2))."""
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"extra field must be KEY=VALUE, got {text!r}")
    try:
        return key.strip(), yaml.safe_load(value)
    except yaml.YAMLError as exc:
        raise argparse.ArgumentTypeError(f"cannot read the value of {key}: {exc}") from None


def named_folder(text: str) -> tuple[str, str]:
    """``NAME=DIR`` -> (NAME, DIR)."""
    name, sep, folder = text.partition("=")
    if not sep or not name.strip() or not folder.strip():
        raise argparse.ArgumentTypeError(f"expected NAME=DIR, got {text!r}")
    return name.strip(), folder.strip()


# ---- option groups ------------------------------------------------------------------------------
def add_request_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("requests")
    g.add_argument("--model", default="piper", help="model field of each request (piper)")
    g.add_argument("--voice", help="voice field of each request (joe; for a Wyoming server: "
                   "none, its default voice)")
    g.add_argument("--format", dest="fmt", default="pcm", choices=FORMATS,
                   help="response_format (pcm: exact sample timing; compressed formats are "
                   "decoded by re-decoding the bytes so far, which costs client CPU)")
    stream = g.add_mutually_exclusive_group()
    stream.add_argument("--stream", action=argparse.BooleanOptionalAction, default=True,
                        help="ask for streamed audio (default: on; piper-http never streams)")
    stream.add_argument("--no-stream-field", dest="stream_field", action="store_false",
                        help="send no stream field at all, exactly the body of the official "
                        "openai client's plain create(): measures the server's default")
    g.add_argument("--sse", action="store_true", help="stream_format sse (implies streaming)")
    g.add_argument("--sample-rate", type=positive_int, default=OPENAI_PCM_RATE,
                   help="Hz of pcm when the server sends no X-Sample-Rate "
                   f"({OPENAI_PCM_RATE}, as OpenAI)")
    g.add_argument("--extra", type=extra_field, action="append", default=[],
                   metavar="KEY=VALUE", help="extra JSON body field (VALUE read as YAML); "
                   "never replaces a field the harness sets (model, voice, input, "
                   "response_format, stream, stream_format, seed; text for piper-http)")
    g.add_argument("--seed", type=non_negative_int,
                   help="request i gets seed SEED + its text index (default: no seed; "
                   "--check uses 0)")
    g.add_argument("--cache", action="store_true",
                   help="let a voxflow server answer from its audio cache: without it every "
                   "request says 'Cache-Control: no-store', so the figures measure synthesis")
    g.add_argument("--timeout", type=positive_float, default=120.0,
                   help="seconds a request may take (120)")
    g.add_argument("--api-key", default=os.environ.get(API_KEY_ENV) or None, metavar="KEY",
                   help="sent as 'Authorization: Bearer KEY' to a voxflow server with API keys "
                   f"(default: ${API_KEY_ENV}, which keeps the key out of the process list); "
                   "never sent to piper-http")


def add_ws_options(p: argparse.ArgumentParser) -> None:
    """``bench run --ws``: streamed text input (`voxflow.bench.ws_client`)."""
    g = p.add_argument_group("streamed text input")
    g.add_argument("--ws", action="store_true",
                   help="each request is a WS /v1/audio/speech/stream session: its text sent "
                   "word by word at --ws-words-per-s, TTFA from the first word sent (voxflow "
                   "only; --concurrency sweeps)")
    g.add_argument("--ws-words-per-s", type=positive_float, default=DEFAULT_WS_WORDS_PER_S,
                   metavar="R", help="with --ws: words sent per second "
                   f"({DEFAULT_WS_WORDS_PER_S:g}, an LLM's pace)")


def wyoming_url(text: str) -> str:
    """``HOST:PORT`` (or ``PORT``, on 127.0.0.1) -> ``tcp://HOST:PORT``, read as ``voxflow serve
    --wyoming`` reads it (`voxflow.wyoming.address.wyoming_address`); port 0 is refused."""
    host, port = wyoming_address(text)
    if port == 0:
        raise argparse.ArgumentTypeError("a server to bench listens on a port above 0")
    return f"tcp://{host or '127.0.0.1'}:{port}"


def add_wyoming_options(p: argparse.ArgumentParser, shorthand: bool) -> None:
    """Wyoming servers (Home Assistant's protocol): `voxflow.bench.wyoming_client`.

    `shorthand`: also ``--wyoming HOST:PORT`` (``bench run``: ``--engine wyoming --url
    tcp://HOST:PORT``).
    """
    g = p.add_argument_group("Wyoming (Home Assistant's protocol)")
    if shorthand:
        g.add_argument("--wyoming", type=wyoming_url, metavar="HOST:PORT",
                       help="bench the Wyoming server at HOST:PORT (same as --engine wyoming "
                       "--url tcp://HOST:PORT)")
    g.add_argument("--wyoming-streaming", action="store_true",
                   help="send the text as Home Assistant streams an LLM's answer "
                   "(synthesize-start, one synthesize-chunk per word at --wyoming-words-per-s, "
                   "the full synthesize, synthesize-stop); first audio counts from the end of "
                   "the first sentence's text")
    g.add_argument("--wyoming-words-per-s", type=positive_float, default=DEFAULT_WS_WORDS_PER_S,
                   metavar="R", help="with --wyoming-streaming: words sent per second "
                   f"({DEFAULT_WS_WORDS_PER_S:g})")


def wyoming_clash(args: argparse.Namespace, engines: set[str]) -> list[str]:
    """The options given that a bench of Wyoming servers cannot honour (empty: none).

    `engines`: the engines benched (``--wyoming-streaming`` needs a wyoming one; request
    options of the OpenAI API need none to be wyoming, or are ignored by it).
    """
    clash = []
    if args.wyoming_streaming and "wyoming" not in engines:
        clash.append("--wyoming-streaming (no Wyoming server is benched)")
    if engines == {"wyoming"}:
        clash += [name for name, on in (
            (f"--format {args.fmt} (Wyoming audio is 16-bit PCM)", args.fmt != "pcm"),
            ("--sse", args.sse), ("--no-stream", not args.stream),
            ("--no-stream-field", not args.stream_field),
            ("--extra (Wyoming events have no extra fields)", bool(args.extra)),
            ("--seed (Wyoming has no seed)", args.seed is not None)) if on]
    return clash


def add_input_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("inputs (default: --sentences benchmarks/data/sentences.txt)")
    g.add_argument("--sentences", type=Path, metavar="FILE",
                   help="one request per non-blank line")
    g.add_argument("--case", dest="cases", type=case_names, action="append", default=[],
                   metavar="NAME", help=f"{', '.join(CASES)} (benchmarks/data/case_NAME.txt); "
                   "comma-separated or repeated")


def add_sweep_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("load")
    g.add_argument("--concurrency", type=concurrency_list, default=DEFAULT_CONCURRENCY,
                   help=f"requests in flight, a sweep ({DEFAULT_CONCURRENCY})")
    g.add_argument("--per-level", type=per_level, default=MIN_PER_LEVEL, metavar="K",
                   help=f"requests per level = K x concurrency (K >= {MIN_PER_LEVEL}; "
                   f"{MIN_PER_LEVEL})")
    g.add_argument("--warmup", type=non_negative_int, default=1, metavar="N",
                   help="unmeasured requests before each level (1)")
    g.add_argument("--repeats", type=positive_int, default=1, metavar="N",
                   help="run the whole sweep N times; report medians with ranges (1)")


def add_open_loop_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group(
        "open loop (instead of --concurrency: requests at seeded Poisson times)")
    g.add_argument("--request-rate", type=rate_list, metavar="R[,R2...]",
                   help="offered requests/s, each run for --duration after --warmup-s")
    g.add_argument("--duration", type=positive_float, default=30.0, metavar="S",
                   help="measured seconds of each rate (30)")
    g.add_argument("--warmup-s", type=non_negative_float, default=5.0, metavar="S",
                   help="unmeasured seconds of sending before each rate's window (5)")
    g.add_argument("--schedule-seed", type=non_negative_int, default=0, metavar="N",
                   help="seed of the arrival times; same seed, same schedule (0)")
    g.add_argument("--slo-ttfa", type=positive_float, default=1.0, metavar="S",
                   help="service level: first audio within S seconds (1.0)")
    g.add_argument("--slo-max-stalls", type=non_negative_int, default=0, metavar="N",
                   help="service level: at most N playback stalls (0)")
    g.add_argument("--find-capacity", action="store_true",
                   help="search the highest rate whose goodput reaches --capacity-goodput")
    g.add_argument("--capacity-start", type=positive_float, metavar="R",
                   help="first rate of the search (default: the last --request-rate, else 1)")
    g.add_argument("--capacity-goodput", type=fraction, default=0.99, metavar="F",
                   help="least goodput (share of requests meeting the service level) (0.99)")
    g.add_argument("--capacity-tolerance", type=tolerance, default=0.05, metavar="F",
                   help="stop when the lowest failing rate is within F of the passing one "
                   "(0.05)")
    g.add_argument("--capacity-max-probes", type=max_probes, default=12, metavar="N",
                   help="most rates the search probes (12)")
    g.add_argument("--capacity-step", type=step_factor, default=2.0, metavar="F",
                   help="factor the search raises the rate by while probes pass (lowers it "
                   "by while they fail) until it brackets the capacity (2.0)")


def add_gate_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("idle gate")
    g.add_argument("--allow-busy", action="store_true",
                   help="measure even if the machine does not become idle (recorded)")
    g.add_argument("--idle-timeout", type=positive_float, default=DEFAULT_IDLE_TIMEOUT_S,
                   metavar="S", help="seconds to wait for an idle machine before each case "
                   f"({DEFAULT_IDLE_TIMEOUT_S:.0f})")
    g.add_argument("--idle-cpu-max", type=positive_float, default=10.0, metavar="PCT",
                   help="most CPU %% of all cores other processes may use (10)")
    g.add_argument("--idle-gpu-max", type=positive_float, default=3.0, metavar="PCT",
                   help="most GPU utilization %% (3)")


def add_output_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("output")
    g.add_argument("--out", type=Path, metavar="FILE.json", help="write the full record here")


# ---- typed values from parsed options -----------------------------------------------------------
def request_headers(args: argparse.Namespace, engine: str) -> dict[str, str]:
    """The headers sent to a voxflow server (`engine` "openai"; none to the others): its API
    key when given, and ``Cache-Control: no-store`` unless ``--cache`` (docs/api.md, Audio
    cache), so a repeated seeded request is synthesized again, not answered from memory."""
    if engine != "openai":
        return {}
    headers = {} if getattr(args, "cache", False) else dict(NO_STORE)
    if args.api_key:
        headers["Authorization"] = f"Bearer {args.api_key}"
    return headers


def target_from(args: argparse.Namespace, engine: str, url: str) -> Target:
    """The server under test at `url` and the request options parsed by `add_request_options`."""
    wyoming = engine == "wyoming"
    voice = args.voice if args.voice is not None else ("" if wyoming else "joe")
    return Target(
        engine=engine, url=url.rstrip("/"), model=args.model, voice=voice, fmt=args.fmt,
        stream=args.stream or args.sse, stream_field=args.stream_field, sse=args.sse,
        sample_rate=args.sample_rate,
        extras=dict(args.extra),
        headers=request_headers(args, engine),
        text_words_per_s=(args.wyoming_words_per_s
                          if wyoming and getattr(args, "wyoming_streaming", False) else None),
    )


def cases_from(args: argparse.Namespace) -> list[Case]:
    """The cases named by ``--case`` and ``--sentences``; the default sentences file if none.

    Raises:
        ValueError: a file is missing, unreadable or has no text.
    """
    names = [n for group in args.cases for n in group]
    cases = [Case.from_file(DATA_DIR / CASES[n], n) for n in dict.fromkeys(names)]
    if args.sentences is not None or not cases:
        cases.append(Case.from_file(args.sentences or DEFAULT_SENTENCES))
    return cases


def plan_from(args: argparse.Namespace) -> SweepPlan:
    return SweepPlan(
        concurrency=args.concurrency, per_level=args.per_level, warmup=args.warmup,
        repeats=args.repeats, seed=args.seed, timeout_s=args.timeout,
        ws_words_per_s=args.ws_words_per_s if getattr(args, "ws", False) else None,
    )


def open_loop_from(args: argparse.Namespace) -> OpenLoopPlan | None:
    """The open-loop plan when ``--request-rate`` or ``--find-capacity`` is given, else None."""
    if args.request_rate is None and not args.find_capacity:
        return None
    rates = args.request_rate or ()
    search = None
    if args.find_capacity:
        start = args.capacity_start or (rates[-1] if rates else 1.0)
        search = CapacitySearch(start=start, goodput=args.capacity_goodput,
                                tolerance=args.capacity_tolerance,
                                max_probes=args.capacity_max_probes,
                                step=args.capacity_step)
    return OpenLoopPlan(
        rates=rates, duration_s=args.duration, warmup_s=args.warmup_s,
        schedule_seed=args.schedule_seed, seed=args.seed, timeout_s=args.timeout,
        repeats=args.repeats, slo=Slo(args.slo_ttfa, args.slo_max_stalls), capacity=search,
    )


def policy_from(args: argparse.Namespace) -> IdlePolicy:
    return IdlePolicy(cpu_max_pct=args.idle_cpu_max, gpu_max_pct=args.idle_gpu_max,
                      timeout_s=args.idle_timeout)
