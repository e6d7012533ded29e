"""NanoCodec decode timing (issue 12), full size, random weights: one-shot vs streamed through
the codec stage's chunk step, on the CPU here and on CUDA when there is one.

The full-size decoder is built from ``full_decoder_manifest.json`` (its config, every key and
shape, checked) with random weights (`loader.random_state_dict`, seed 0). Decodes one utterance
of ``--frames`` codec frames (random ids 0..2015, 21.53 fps, 1024 samples each) once whole
(FSQ + one-shot decode) and streamed from zero state in chunks of 1, 2, 4 and 8 frames through
`voxflow.models.nanocodec.step.ChunkStep`, the step `NanoCodecStage` runs, with the stream's
caches in a pool slot on the decoder's device; float32, batch 1. With ``--graphs`` on CUDA each
chunk length is also captured as a CUDA graph (the engine's GraphRunner) and streamed by replay:
``graph:N`` modes beside the ``eager:N`` ones. ``--check-replay`` streams the same codes eagerly
and by replay in the same chunking and compares them (bit-identical expected, spec §1 item 8).
With ``--batch B`` (B > 1) every stream mode also runs for B different streams decoded together,
one step per chunk for all of them (``eager:4x8``, ``graph:4x8``: the stage's batched path,
slots gathered by row index), its RTF per second of all B streams' audio. TF32 is off on CUDA
(spec §6 "Numerics").

After ``--warmup`` untimed rounds, ``--repeats`` rounds time every mode once, in rotating order
(a busy spell on a shared machine does not land on one mode only); the device is synchronised
before each timestamp. Reported per mode: median (and range) of the compute time, real-time
factor (compute s / audio s) and RTFx (its inverse); per stream also the ratio one-shot RTF /
streamed RTF (issue 12 accepts >= 0.9 at 4-frame chunks), the codec time to first audio
(median compute time of a stream's first chunk: spec §10 ``codec_ttfa_ms``), and from the
profiler inside one mid-stream chunk step: ``host_device_copies`` (CPU: ``aten::_to_copy`` of a
real tensor; CUDA: ``Memcpy HtoD`` / ``Memcpy DtoH`` activities, device-to-device copies not
counted) and ``host_syncs`` (``.item()`` reads; CUDA: stream and device synchronisations, less
the one the measurement itself makes; ``host_syncs_counted`` before that). The codes are on
the device before the step and the audio stays there, so 0 is the goal; the stage around it
adds one upload of a part's codes and one read-back of its audio per item
(``stage_io_copies_per_item``: 2 on CUDA, 0 on the CPU).
The machine's load average is printed before and after. Random weights: only times and
identity mean anything (the output is noise).

    .venv/bin/python benchmarks/nanocodec_cpu.py --frames 32 --repeats 5 --out nanocodec.json
    .venv/bin/python benchmarks/nanocodec_cpu.py --device cuda --graphs --check-replay \
        --frames 128 --repeats 10 --out nanocodec_gpu.json
    .venv/bin/python benchmarks/nanocodec_cpu.py --tiny --frames 16 --repeats 1 --check-replay

``--threads`` defaults to 1: on the shared 2-core machine (load average 7-8 from other work) two
intra-op threads made every mode 3-5x slower and the small per-chunk ops worst of all.

Earlier runs of 2026-11-30 (stream.decode_chunk on a latent, before the stage's step existed;
2 shared cores, torch 2.13.0 CPU, 1 thread, 32 frames = 1.486 s, median of 5), streamed at
1 / 2 / 4 / 8 frames:

- plain convs (load average 3.4): one-shot RTF 0.727; streamed 0.42 / 0.71 / 0.81 / 0.92 of the
  one-shot RTFx; TTFA 79 / 95 / 164 / 290 ms.
- prepacked convs (load average 1.9 and 2.9): one-shot RTF 0.750 and 0.740; streamed 0.70 /
  0.86 / 0.97 / 1.03 and 0.68 / 0.82 / 0.90 / 0.96 of the one-shot RTFx; TTFA 48-49 / 79-83 /
  142-151 / 269-285 ms. What is left at 4 frames is mostly per-chunk dispatch (~6 ms a chunk for
  the 97 layers' ~1,600 eager ops) and stage 0's convs on only 32 columns. With plain weights
  every chunk paid oneDNN's per-call weight layout cost once per conv;
  layers.prepack_cpu_weight reorders the folded weights once at load.

Runs through the stage's step: docs/benchmarks-archive.md ("NanoCodec decode").
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from voxflow.models.nanocodec.config import SAMPLE_RATE, DecoderConfig  # noqa: E402
from voxflow.models.nanocodec.fsq import NUM_CODES, NUM_GROUPS, fsq_decode  # noqa: E402
from voxflow.models.nanocodec.loader import (  # noqa: E402
    check_full_size,
    load_decoder,
    random_state_dict,
    read_manifest,
)
from voxflow.models.nanocodec.step import ChunkStep  # noqa: E402
from voxflow.models.nanocodec.stream import StatePool, decode  # noqa: E402

FIXTURES = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "nanocodec"
MANIFEST = FIXTURES / "full_decoder_manifest.json"
CUDA_COPIES = ("Memcpy HtoD", "Memcpy DtoH")  # profiler names of host<->device copies
CUDA_SYNCS = ("cudaStreamSynchronize", "cudaDeviceSynchronize")
CPU_TIME: list[float] = []  # process CPU seconds of the timed calls, appended by `timed`


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed(fn: Callable[[], object], device: torch.device) -> float:
    """Wall seconds of ``fn()``, device synchronised before each timestamp; its process CPU
    seconds (all threads) are appended to `CPU_TIME` (on a shared machine they count only
    this process's work, not the time spent waiting for a core)."""
    sync(device)
    start, cpu = time.perf_counter(), time.process_time()
    fn()
    sync(device)
    CPU_TIME.append(time.process_time() - cpu)
    return time.perf_counter() - start


def pieces(codes: Tensor, chunk: int) -> list[Tensor]:
    """codes [B, 8, T] cut into chunks of ``chunk`` frames (the last may be shorter)."""
    return [codes[:, :, a : a + chunk] for a in range(0, codes.shape[-1], chunk)]


def stream_once(
    step: ChunkStep, codes: Tensor, chunk: int, eager: bool
) -> tuple[float, float, Tensor]:
    """(total compute s, first chunk s, audio [B, 1024·T]) of B = codes.shape[0] streams decoded
    together (one step per chunk for all B) from fresh slots (freed after); timed per step."""
    slots = [step.pool.acquire(f"bench{i}") for i in range(codes.shape[0])]
    cpu_mark = len(CPU_TIME)
    out: list[Tensor] = []
    try:
        first = total = 0.0
        for piece in pieces(codes, chunk):
            took = timed(lambda p=piece: out.append(step.run(slots, p, eager=eager)[0]),
                         step.device)
            first = first or took
            total += took
    finally:
        for slot in slots:
            step.pool.release(slot)
    CPU_TIME[cpu_mark:] = [sum(CPU_TIME[cpu_mark:])]  # one entry per stream
    return total, first, torch.cat(out, dim=-1)


def copies_per_chunk(step: ChunkStep, codes: Tensor, chunk: int, eager: bool) -> dict[str, int]:
    """Profiler counts inside one mid-stream chunk step (see the module docstring)."""
    from torch.profiler import ProfilerActivity, profile

    cuda = step.device.type == "cuda"
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    slots = [step.pool.acquire(f"profile{i}") for i in range(codes.shape[0])]
    try:
        if codes.shape[-1] >= 2 * chunk:  # profile a mid-stream chunk, not the first
            step.run(slots, codes[:, :, :chunk], eager=eager)
        second = codes[:, :, -chunk:]
        sync(step.device)
        with profile(activities=activities, record_shapes=True) as prof:
            step.run(slots, second, eager=eager)
            sync(step.device)  # one device synchronisation of our own (subtracted below)
    finally:
        for slot in slots:
            step.pool.release(slot)
    copies = syncs = 0
    for event in prof.events():
        if event.name == "aten::_to_copy" and not cuda and any(event.input_shapes):
            copies += 1
        elif event.name in ("aten::_local_scalar_dense", "aten::item"):
            syncs += 1
        elif event.name.startswith(CUDA_COPIES):
            copies += 1
        elif event.name in CUDA_SYNCS:
            syncs += 1
    own = 1 if cuda else 0  # the synchronisation the measurement makes
    return {"host_device_copies": copies, "host_syncs": max(syncs - own, 0),
            "host_syncs_counted": syncs}


def check_replay(step: ChunkStep, codes: Tensor, chunks: list[int]) -> dict[str, Any]:
    """Per chunk length (and per batch of B = codes.shape[0] streams if B > 1): the same codes
    streamed eagerly and by replay, compared."""
    out: dict[str, Any] = {}
    batches = [codes[:1]] + ([codes] if codes.shape[0] > 1 else [])
    for chunk, batch in ((c, b) for b in batches for c in chunks):
        eager = stream_once(step, batch, chunk, eager=True)[2]
        graph = stream_once(step, batch, chunk, eager=False)[2]
        again = stream_once(step, batch, chunk, eager=False)[2]
        rows = batch.shape[0]
        out[f"{chunk}x{rows}" if rows > 1 else str(chunk)] = {
            "captured": (rows, chunk) in step.graphs.graphs,
            "bit_identical": bool(torch.equal(eager, graph)),
            "max_abs_diff": float((eager.double() - graph.double()).abs().max()),
            "rerun_bit_identical": bool(torch.equal(graph, again)),
        }
    return out


def summary(times: list[float], audio_s: float) -> dict[str, float]:
    med = statistics.median(times)
    return {"median_s": med, "min_s": min(times), "max_s": max(times),
            "rtf": med / audio_s, "rtfx": audio_s / med}


def random_weights(args: argparse.Namespace) -> tuple[DecoderConfig, dict[str, Tensor]]:
    """The decoder's config and random unfolded weights: full size from the manifest (checked
    with loader.check_full_size: 387 tensors, 31,564,085 parameters folded, 97 caches), every
    tensor of the manifest's shape; or the tiny fixture config (smoke runs)."""
    if args.tiny:
        config = DecoderConfig.tiny()
        return config, random_state_dict(config, seed=0)
    manifest = read_manifest(args.manifest)
    check_full_size(manifest)
    weights = random_state_dict(manifest.config, seed=0)
    shapes = {k: tuple(v.shape) for k, v in weights.items()}
    if shapes != manifest.shapes:
        raise ValueError("random weights differ from the manifest's keys or shapes")
    return manifest.config, weights


def run(args: argparse.Namespace, device: torch.device) -> dict[str, Any]:
    config, weights = random_weights(args)
    decoder = load_decoder(weights, config, device=device)
    rows = sorted({1, args.batch})
    step = ChunkStep(StatePool(decoder, max_streams=args.batch),
                     args.chunks if args.graphs else (), rows)
    started = time.perf_counter()
    step.start()
    capture_s = time.perf_counter() - started
    progress(f"decoder built, {len(step.graphs.graphs)} graphs captured in {capture_s:.1f} s")
    gen = torch.Generator().manual_seed(1)
    batch_codes = torch.randint(0, NUM_CODES, (args.batch, NUM_GROUPS, args.frames),
                                generator=gen).to(device)  # (B, 8, T): B different streams
    codes = batch_codes[:1]
    audio_s = args.frames * config.samples_per_frame / SAMPLE_RATE
    shapes = [(kind, c, r) for r in rows for kind in ("eager", "graph") for c in args.chunks
              if kind == "eager" or (r, c) in step.graphs.graphs]
    named = {f"{kind}:{c}" + (f"x{r}" if r > 1 else ""): (kind, c, r) for kind, c, r in shapes}
    modes = ["one_shot", *named]
    times: dict[str, list[float]] = {m: [] for m in modes}
    cpu_times: dict[str, list[float]] = {m: [] for m in modes}
    firsts: dict[str, list[float]] = {m: [] for m in modes}
    for round_ in range(args.warmup + args.repeats):
        shift = round_ % len(modes)
        for mode in modes[shift:] + modes[:shift]:
            if mode == "one_shot":
                took = timed(partial(decode, decoder, fsq_decode(codes)), device)
            else:
                kind, chunk, n = named[mode]
                took, first, _ = stream_once(step, batch_codes[:n], chunk, eager=kind == "eager")
            if round_ >= args.warmup:
                times[mode].append(took)
                cpu_times[mode].append(CPU_TIME[-1])
                if mode != "one_shot":
                    firsts[mode].append(first)
        progress(f"round {round_ + 1} of {args.warmup + args.repeats} ({len(modes)} modes)")
    one_shot: dict[str, Any] = dict(summary(times["one_shot"], audio_s))
    one_shot["cpu"] = summary(cpu_times["one_shot"], audio_s)
    streamed: dict[str, Any] = {}
    for mode, (kind, chunk, n) in named.items():
        # B streams decode B times the audio: RTF per audio second of all of them
        row: dict[str, Any] = {"streams": n, **summary(times[mode], n * audio_s)}
        row["cpu"] = cpu = summary(cpu_times[mode], n * audio_s)
        # one-shot RTF / streamed RTF: 1.0 = streaming costs nothing extra (accept >= 0.9 at 4);
        # above 1 for B streams: batching pays more than streaming costs
        row["ratio_to_one_shot"] = one_shot["rtf"] / row["rtf"]
        row["cpu_ratio_to_one_shot"] = one_shot["cpu"]["rtf"] / cpu["rtf"]
        row["ttfa_ms"] = 1e3 * statistics.median(firsts[mode])
        row.update(copies_per_chunk(step, batch_codes[:n], chunk, eager=kind == "eager"))
        streamed[mode] = row
    progress("copies and syncs per chunk step counted")
    result: dict[str, Any] = {
        "decoder": "tiny" if args.tiny else "full", "weights": "random: output is noise",
        "frames": args.frames, "audio_s": audio_s, "one_shot": one_shot, "streamed": streamed,
        "stage_io_copies_per_item": 2 if device.type == "cuda" else 0,
        "graphs": {"status": {f"{r}x{t}": s for (r, t), s in step.graphs.status.items()},
                   "capture_s": capture_s},
    }
    if args.check_replay:
        result["replay_vs_eager"] = check_replay(step, batch_codes, args.chunks)
    return result


STARTED = time.perf_counter()


def progress(message: str) -> None:
    """A line on stderr with the seconds since start: a run cut off by a time limit still
    says how far it got."""
    print(f"[{time.perf_counter() - STARTED:.1f} s] {message}", file=sys.stderr, flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--frames", type=int, default=32, help="codec frames (21.53 per s)")
    parser.add_argument("--chunks", type=lambda s: [int(v) for v in s.split(",")],
                        default=[1, 2, 4, 8], help="stream chunk sizes, frames")
    parser.add_argument("--batch", type=int, default=1,
                        help="also stream this many streams in one step per chunk (B > 1)")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--threads", type=int, default=1, help="intra-op threads (see above)")
    parser.add_argument("--device", default="auto", help="cpu, cuda, or auto (cuda if there)")
    parser.add_argument("--graphs", action="store_true",
                        help="also capture each chunk length as a CUDA graph (CUDA only)")
    parser.add_argument("--check-replay", action="store_true",
                        help="compare replayed and eager streams of the same chunking")
    parser.add_argument("--tiny", action="store_true", help="the tiny decoder (smoke runs)")
    parser.add_argument("--manifest", type=Path, default=MANIFEST,
                        help="full_decoder_manifest.json the full-size decoder is built from")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    name = ("cuda" if torch.cuda.is_available() else "cpu") if args.device == "auto" \
        else args.device
    device = torch.device(name)
    if device.type == "cuda":  # parity runs: no TF32 (spec §6 "Numerics")
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        torch.set_float32_matmul_precision("highest")
    load_before = os.getloadavg()
    result = run(args, device)
    result["machine"] = {
        "platform": platform.platform(), "cpus": os.cpu_count(), "threads": args.threads,
        "torch": torch.__version__, "device": str(device),
        "gpu": torch.cuda.get_device_name(device) if device.type == "cuda" else None,
        "loadavg_before": load_before, "loadavg_after": os.getloadavg(),
    }
    print(json.dumps(result, indent=2))
    if args.out:
        args.out.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
