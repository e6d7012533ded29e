"""NanoCodec decoder timing, full size, random weights: one-shot vs streamed decode.

Decodes one utterance of ``--frames`` latent frames (21.53 fps, 1024 samples each) once whole
and once streamed in chunks of 1, 2, 4 and 8 frames from zero state (stream.decode_chunk, the
per-stream caches on the decoder's device), float32, batch 1. After ``--warmup`` untimed rounds,
``--repeats`` rounds each time every mode once, in rotating order (so a busy spell on a shared
machine does not land on one mode only); the device is synchronised before each timestamp.
Reported per mode: the median (and range) of the compute time, real-time factor (compute s /
audio s) and RTFx (its inverse); for streams also the ratio one-shot RTF / streamed RTF (issue
12 accepts >= 0.9 at 4-frame chunks), the codec time to first audio (median compute time of a
stream's first chunk), and the host<->device copies and host syncs inside one mid-stream chunk
(profiler events; the latent is already on the device and the audio stays there: 0 is the goal).
The machine's load average is printed before and after. Random weights: only the times mean
anything (the output is noise).

    .venv/bin/python benchmarks/nanocodec_cpu.py --frames 32 --repeats 5 --out nanocodec_cpu.json

``--threads`` defaults to 1: on the shared 2-core machine (load average 7-8 from other work) two
intra-op threads made every mode 3-5x slower and the small per-chunk ops worst of all.

Runs of 2026-11-30 (2 shared cores, torch 2.13.0 CPU, 1 thread, 32 frames = 1.486 s, median
of 5 after 1 warm-up round), streamed at 1 / 2 / 4 / 8 frames:

- plain convs (load average 3.4): one-shot RTF 0.727; streamed RTF 1.716 / 1.030 / 0.894 /
  0.789, i.e. 0.42 / 0.71 / 0.81 / 0.92 of the one-shot RTFx; TTFA 79 / 95 / 164 / 290 ms.
- prepacked convs (load average 1.9): one-shot RTF 0.750; streamed RTF 1.069 / 0.877 / 0.774 /
  0.730, i.e. 0.70 / 0.86 / 0.97 / 1.03 of the one-shot RTFx; TTFA 48 / 79 / 142 / 269 ms.
  Rerun at load average 2.9: one-shot 0.740; streamed 1.097 / 0.900 / 0.824 / 0.772, i.e.
  0.68 / 0.82 / 0.90 / 0.96; TTFA 49 / 83 / 151 / 285 ms. So 4-frame streaming sits at
  0.90-0.97 here, its margin over issue 12's 0.9 within this machine's noise; what is left is
  mostly per-chunk dispatch (~6 ms a chunk for the 97 layers' ~1,600 eager ops, measured with
  near-zero compute) and stage 0's convs on only 32 columns.

0 host copies and 0 syncs per chunk in both. With plain weights every chunk paid oneDNN's
per-call weight layout cost once per conv (a 432x432 k11 conv on 8 columns: 2.7 ms plain,
0.8 ms prepacked), which the one-shot decode pays once in all; layers.prepack_cpu_weight now
reorders the folded weights once at load, so 4-frame streaming meets issue 12's 0.9.
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

import torch
from torch import Tensor

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from voxflow.models.nanocodec.config import SAMPLE_RATE, DecoderConfig  # noqa: E402
from voxflow.models.nanocodec.decoder import NanoCodecDecoder  # noqa: E402
from voxflow.models.nanocodec.loader import load_decoder, random_state_dict  # noqa: E402
from voxflow.models.nanocodec.stream import StatePool, decode, decode_chunk  # noqa: E402

# CUDA profiler events that move data between host and device or wait for the device.
CUDA_COPY_MARKERS = ("Memcpy DtoH", "Memcpy HtoD", "cudaMemcpy", "cudaStreamSynchronize")


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


CPU_TIME: list[float] = []  # process CPU seconds of the timed calls, appended by `timed`


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


def stream_once(
    decoder: NanoCodecDecoder, pool: StatePool, latent: Tensor, chunk: int, device: torch.device
) -> tuple[float, float]:
    """(total compute s, first chunk s) of one streamed decode; the slot freed after it."""
    state = pool.acquire("bench")
    cpu_mark = len(CPU_TIME)
    try:
        first = total = 0.0
        for start in range(0, latent.shape[-1], chunk):
            piece = latent[:, :, start : start + chunk]
            took = timed(partial(decode_chunk, decoder, state, piece), device)
            first = first or took
            total += took
    finally:
        pool.release(state)
    CPU_TIME[cpu_mark:] = [sum(CPU_TIME[cpu_mark:])]  # one entry per stream
    return total, first


def copies_per_chunk(
    decoder: NanoCodecDecoder, pool: StatePool, latent: Tensor, chunk: int
) -> dict[str, int]:
    """Profiler counts inside one mid-stream chunk: tensor copies to another device or dtype
    (``aten::_to_copy`` of a real tensor; a Python scalar wrapped for an op is not one), host
    syncs (``.item()``), and on CUDA every memcpy and stream synchronisation."""
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU]
    if latent.device.type == "cuda":
        activities.append(ProfilerActivity.CUDA)
    state = pool.acquire("profile")
    try:
        decode_chunk(decoder, state, latent[:, :, :chunk])  # not the first chunk
        second = latent[:, :, chunk : 2 * chunk]
        with profile(activities=activities, record_shapes=True) as prof:
            decode_chunk(decoder, state, second)
            sync(latent.device)
    finally:
        pool.release(state)
    copies = syncs = 0
    for event in prof.events():
        if event.name == "aten::_to_copy" and any(event.input_shapes):
            copies += 1
        elif event.name in ("aten::_local_scalar_dense", "aten::item"):
            syncs += 1
        elif any(marker in event.name for marker in CUDA_COPY_MARKERS):
            copies += 1
    return {"host_device_copies": copies, "host_syncs": syncs}


def summary(times: list[float], audio_s: float) -> dict[str, float]:
    med = statistics.median(times)
    return {"median_s": med, "min_s": min(times), "max_s": max(times),
            "rtf": med / audio_s, "rtfx": audio_s / med}


def run(args: argparse.Namespace) -> dict[str, object]:
    device = torch.device(args.device)
    config = DecoderConfig()
    decoder = load_decoder(random_state_dict(config, seed=0), config, device=device)
    pool = StatePool(decoder, max_streams=1)
    gen = torch.Generator().manual_seed(1)
    latent = (torch.rand(1, config.input_dim, args.frames, generator=gen) * 2 - 1).to(device)
    audio_s = args.frames * config.samples_per_frame / SAMPLE_RATE
    modes: list[int] = [0, *args.chunks]  # 0 = one-shot
    times: dict[int, list[float]] = {m: [] for m in modes}
    cpu_times: dict[int, list[float]] = {m: [] for m in modes}
    firsts: dict[int, list[float]] = {m: [] for m in args.chunks}
    for round_ in range(args.warmup + args.repeats):
        order = modes[round_ % len(modes):] + modes[: round_ % len(modes)]
        for mode in order:
            if mode == 0:
                took = timed(partial(decode, decoder, latent), device)
            else:
                took, first = stream_once(decoder, pool, latent, mode, device)
            if round_ >= args.warmup:
                times[mode].append(took)
                cpu_times[mode].append(CPU_TIME[-1])
                if mode:
                    firsts[mode].append(first)
    one_shot: dict[str, object] = dict(summary(times[0], audio_s))
    one_shot["cpu"] = summary(cpu_times[0], audio_s)
    streamed = {}
    for chunk in args.chunks:
        row: dict[str, object] = dict(summary(times[chunk], audio_s))
        row["cpu"] = cpu = summary(cpu_times[chunk], audio_s)
        # one-shot RTF / streamed RTF: 1.0 = streaming costs nothing extra (accept >= 0.9 at 4)
        row["ratio_to_one_shot"] = statistics.median(times[0]) / statistics.median(times[chunk])
        row["cpu_ratio_to_one_shot"] = one_shot["cpu"]["rtf"] / cpu["rtf"]  # type: ignore[index]
        row["ttfa_ms"] = 1e3 * statistics.median(firsts[chunk])
        row.update(copies_per_chunk(decoder, pool, latent, chunk))
        streamed[str(chunk)] = row
    return {"frames": args.frames, "audio_s": audio_s, "one_shot": one_shot,
            "streamed": streamed}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--frames", type=int, default=32, help="latent frames (21.53 per s)")
    parser.add_argument("--chunks", type=lambda s: [int(v) for v in s.split(",")],
                        default=[1, 2, 4, 8], help="stream chunk sizes, frames")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--threads", type=int, default=1, help="intra-op threads (see above)")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    load_before = os.getloadavg()
    result = run(args)
    result["machine"] = {
        "platform": platform.platform(), "cpus": os.cpu_count(), "threads": args.threads,
        "torch": torch.__version__, "device": args.device,
        "loadavg_before": load_before, "loadavg_after": os.getloadavg(),
    }
    print(json.dumps(result, indent=2))
    if args.out:
        args.out.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
