"""`voxflow bench` and `voxflow eval`: argument wiring; the work is in voxflow.bench/eval."""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

from voxflow.bench import options as bench_options
from voxflow.bench.adapters import ENGINES
from voxflow.bench.ceiling_command import add_ceiling
from voxflow.bench.soak_command import add_soak
from voxflow.cli.common import CliError
from voxflow.cli.extras import missing_module_error

log = logging.getLogger(__name__)


def add_bench(commands) -> None:
    bench = commands.add_parser(
        "bench", help="measure speech servers: latency, throughput, streaming, determinism",
        description="Benchmark a server that speaks the OpenAI speech API (or piper-tts's "
        "HTTP server). See docs/benchmarks.md.",
    )
    kinds = bench.add_subparsers(dest="bench_command", metavar="KIND", required=True)
    run = kinds.add_parser(
        "run", help="one server: a concurrency sweep, or --check N for reproducibility",
        description="Measure one running server: TTFA, latency, audio-s/s, RTF and stalls per "
        "concurrency level, after an idle gate.",
    )
    run.add_argument("--engine", choices=ENGINES, default="openai",
                     help="server API: openai (voxflow and others), piper-http, or wyoming (a url "
                     "tcp://HOST:PORT) (default: openai)")
    run.add_argument("--url", default="http://127.0.0.1:8000",
                     help="server base URL (http://127.0.0.1:8000; tcp://HOST:PORT for wyoming)")
    run.add_argument("--server-repo", metavar="DIR",
                     help="git checkout the server runs from, for the report (default: .)")
    run.add_argument("--check", type=bench_options.positive_int, metavar="N",
                     help="no timing: run each case N times, print each run's audio sha256, "
                     "exit 1 if runs with the same seed differ")
    run.add_argument("--save-audio-dir", type=Path, metavar="DIR",
                     help="save each measured request's audio as DIR/CASE/cC-rR/TEXT_REQ.wav")
    compare = kinds.add_parser(
        "compare", help="start servers in rotation (a b b a ...) and compare them",
        description="Start each arm's server, wait for health, run the same bench, stop it; "
        "rotate the arms for --runs starts each; print medians, ranges, ratios, verdicts.",
    )
    compare.add_argument(
        "--arm", dest="arms", action="append", required=True, metavar="NAME[:ENGINE]=COMMAND",
        help="a server start command with {port}; the first arm is the base (2 or 3 arms)")
    compare.add_argument("--arm-cwd", type=bench_options.named_folder, action="append",
                         default=[], metavar="NAME=DIR", help="run arm NAME's command in DIR")
    compare.add_argument("--engine", choices=ENGINES, default="openai",
                         help="engine of arms that name none (openai)")
    compare.add_argument("--runs", type=bench_options.positive_int, default=3, metavar="N",
                         help="server starts per arm (3)")
    compare.add_argument("--health-timeout", type=bench_options.positive_float, default=180.0,
                         metavar="S", help="seconds a server may take to become ready (180)")
    compare.add_argument("--retakes", type=bench_options.non_negative_int, default=2,
                         metavar="N", help="measure a level again (at most N times) when other "
                         "processes averaged more than --idle-cpu-max during it (2)")
    compare.add_argument("--quality", action="store_true",
                         help="also word error rate and speaker similarity of each arm")
    compare.add_argument("--ref", type=Path, metavar="REF.wav",
                         help="speaker reference for --quality (default: the base arm's clips)")
    compare.add_argument("--work-dir", type=Path, metavar="DIR",
                         help="server logs and quality clips (default: a new temp folder)")
    for p in (run, compare):
        bench_options.add_request_options(p)
        bench_options.add_input_options(p)
        bench_options.add_sweep_options(p)
        bench_options.add_open_loop_options(p)
        bench_options.add_gate_options(p)
        bench_options.add_output_options(p)
    bench_options.add_ws_options(run)
    bench_options.add_wyoming_options(run, shorthand=True)
    bench_options.add_wyoming_options(compare, shorthand=False)
    run.set_defaults(handler=cmd_bench)
    compare.set_defaults(handler=cmd_bench)
    add_soak(kinds).set_defaults(handler=cmd_bench)
    add_ceiling(kinds).set_defaults(handler=cmd_bench)


def add_eval(commands) -> None:
    from voxflow.eval.command import named_folder

    evaluate = commands.add_parser(
        "eval", help="quality of audio clips: word error rate, speaker similarity",
        description="Evaluate audio clips offline (Whisper tiny.en, Resemblyzer).",
    )
    kinds = evaluate.add_subparsers(dest="eval_command", metavar="KIND", required=True)
    wer = kinds.add_parser(
        "wer", help="word error rate of clips against their texts",
        description="Transcribe each clip (NNN*.wav says line NNN of --sentences, from 0), "
        "normalize both sides (case, punctuation, numbers as words) and print the word "
        "error rate per clip and overall.",
    )
    wer.add_argument("--audio-dir", type=Path, required=True, metavar="DIR")
    wer.add_argument("--sentences", type=Path, required=True, metavar="FILE")
    wer.add_argument("--threads", type=bench_options.positive_int, default=2,
                     help="ASR CPU threads (2)")
    wer.add_argument("--out", type=Path, metavar="FILE.json", help="write the result as JSON")
    speaker = kinds.add_parser(
        "speaker", help="speaker similarity to a reference, and clip identity between folders",
        description="Cosine similarity of each clip's Resemblyzer embedding to the reference "
        "(mean and min per folder); for each pair of folders, clip by clip: identical bytes, "
        "different length, or same length with its SNR in dB.",
    )
    speaker.add_argument("--ref", type=Path, required=True, metavar="REF.wav")
    speaker.add_argument("folders", type=named_folder, nargs="+", metavar="NAME=DIR")
    speaker.add_argument("--out", type=Path, metavar="FILE.json", help="write the result as JSON")
    wer.set_defaults(handler=cmd_eval)
    speaker.set_defaults(handler=cmd_eval)


def cmd_bench(args: argparse.Namespace) -> int:
    """``voxflow bench run|compare|soak|ceiling`` (see `voxflow.bench.command`,
    `.soak_command`, `.ceiling_command`)."""
    from voxflow.bench import command
    from voxflow.bench.ceiling_command import bench_ceiling
    from voxflow.bench.errors import BenchError
    from voxflow.bench.soak_command import bench_soak

    handler = {"run": command.bench_run, "compare": command.bench_compare,
               "soak": bench_soak, "ceiling": bench_ceiling}[args.bench_command]
    try:
        return handler(args)
    except BenchError as exc:
        raise CliError(str(exc), exc.exit_code) from None
    except ModuleNotFoundError as exc:  # --quality: Whisper and Resemblyzer (the eval extra)
        raise missing_module_error(exc, f"voxflow bench {args.bench_command}") from None


def cmd_eval(args: argparse.Namespace) -> int:
    """``voxflow eval wer|speaker`` (see `voxflow.eval.command`)."""
    from voxflow.eval import command

    handler = command.eval_wer if args.eval_command == "wer" else command.eval_speaker
    try:
        return handler(args)
    except ValueError as exc:
        raise CliError(str(exc)) from None
    except ModuleNotFoundError as exc:  # the eval extra is not installed (`make serve`)
        raise missing_module_error(exc, f"voxflow eval {args.eval_command}") from None
