"""CosyVoice3 checks for one GPU, steps `cv3-parity` and `cv3-solve` of `benchmarks/gpu/run.sh`.

Steps (each writes one JSON part; `merge` joins them):

- ``parity``: the tiny fixtures on `--device` (spec §1 items 7-10): flow inference mels
  (``d.*``), HiFT ``full.speech``, the token2wav loop's streamed and offline audio, 20 greedy
  LM steps (logits within 1e-4, tokens exact). Tolerances: spec §1.
- ``solve``: the served flow solve (`FlowBucketRunner.forward`: 10-step Euler + CFG, spec §6,
  one streaming flag per row), full size with random weights (seed 0), on padded inputs of
  each (batch, frame bucket) with batch x frames within the capture budget: captured with the
  engine's `voxflow.stages.graphs.GraphRunner` (CUDA graph, one pool, largest first), replay
  compared with eager on the same padded inputs (bit-identical expected, spec §10), and timed,
  eager vs replay, median of `--repeats` device-synchronized calls. TF32 is off (spec §10).
  Once per `--dtypes` entry (float32, bfloat16: the `estimator_dtype` setting, spec §10 asks
  for replay = eager in both), each with the largest bf16-vs-fp32 difference of the mels.
  On a CPU nothing is captured and replay is eager: the step then only checks that it runs
  (``--tiny`` for the small flow).
- ``merge``: the parts into one JSON.

    .venv/bin/python benchmarks/gpu/cosyvoice3.py parity --device cuda --out parity.json
    .venv/bin/python benchmarks/gpu/cosyvoice3.py solve --device cuda --batches 1,8 \
        --buckets 100,250,500,1000 --out solve.json
    .venv/bin/python benchmarks/gpu/cosyvoice3.py merge --out all.json parity.json solve.json

Random weights: the solve's output is noise; only time and identity mean anything.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from voxflow.models.cosyvoice3.flow import (  # noqa: E402
    CausalMaskedDiffWithDiT,
    FlowConfig,
)
from voxflow.models.cosyvoice3.flow_bucket import FlowBucketRunner  # noqa: E402
from voxflow.models.cosyvoice3.loader import read_safetensors  # noqa: E402
from voxflow.models.cosyvoice3.precision import ESTIMATOR_DTYPES, full_float32  # noqa: E402
from voxflow.models.cosyvoice3.weights import REPO_FIXTURES  # noqa: E402
from voxflow.stages.graphs import GraphRunner  # noqa: E402

SOLVE = 1e-4  # spec §1: 10-step solves, the vocoder and end-to-end audio
PAD = 37  # frames of padding in each real row (spec §10's tests pad by 0, 1, 37 or 2x)


def max_diff(a: Tensor, b: Tensor) -> float:
    return float((a.detach().double().cpu() - b.detach().double().cpu()).abs().max())


def sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize(device)


def environment(device: str) -> dict[str, Any]:
    """What ran: torch, device name, TF32 flags."""
    info: dict[str, Any] = {"torch": torch.__version__, "device": device,
                            "host": platform.node(), "python": platform.python_version()}
    if device.startswith("cuda") and torch.cuda.is_available():
        info["gpu"] = torch.cuda.get_device_name(device)
        info["tf32_matmul"] = torch.backends.cuda.matmul.allow_tf32
        info["tf32_cudnn"] = torch.backends.cudnn.allow_tf32
    return info


# ---- parity ----------------------------------------------------------------------------------

def tensors(name: str) -> dict[str, Tensor]:
    """The tensors of the fixture file `name` (tests/fixtures/cosyvoice3), on the CPU. Read
    through voxflow's own loader: nothing here imports pytest or a test module (the GPU
    machine has neither)."""
    return read_safetensors(REPO_FIXTURES / name)


def meta(name: str) -> Any:
    """The fixture JSON document `name`."""
    return json.loads((REPO_FIXTURES / name).read_text(encoding="utf-8"))


def parity(device: str) -> dict[str, Any]:
    """The tiny fixtures on `device`: {check: {"max_diff", "tolerance", "ok"}}."""
    from voxflow.models.cosyvoice3.hift import CausalHiFTGenerator, HiFTConfig
    from voxflow.models.cosyvoice3.lm import (
        TINY_LM_CONFIG,
        CosyVoice3LM,
        LMDecoder,
        length_limits,
    )
    from voxflow.models.cosyvoice3.sampling import GreedySampler
    from voxflow.models.cosyvoice3.token2wav import (
        FlowPrompt,
        Token2WavConfig,
        Token2WavSegment,
    )

    # TF32 off for matmuls and cuDNN convs, as the served models run (weights.py); torch's
    # default leaves cuDNN's TF32 on, which put HiFT 1.2e-4 off on the first H200 run
    full_float32(torch.device(device))
    checks: dict[str, Any] = {}

    def check(name: str, diff: float, tolerance: float) -> None:
        checks[name] = {"max_diff": diff, "tolerance": tolerance, "ok": diff <= tolerance}

    on = {k: v.to(device) for k, v in tensors("flow_tiny_fixtures.safetensors").items()}
    flow = CausalMaskedDiffWithDiT(FlowConfig.tiny())
    flow.load_state_dict(tensors("flow_tiny_state_dict.safetensors"), strict=True)
    flow = flow.to(device).eval()
    for mode, streaming in (("nonstream", False), ("stream", True)):
        for end, finalize in (("final", True), ("nonfinal", False)):
            mel = flow.inference(on["in.token"], on["in.prompt_token"], on["in.prompt_feat"],
                                 on["in.embedding"], streaming=streaming, finalize=finalize)
            check(f"flow d.{mode}.{end}.mel", max_diff(mel, on[f"d.{mode}.{end}.mel"]), SOLVE)

    hfx = tensors("hift_tiny_fixtures.safetensors")
    hift = CausalHiFTGenerator(HiFTConfig.tiny())
    hift.load_state_dict(tensors("hift_tiny_state_dict.safetensors"), strict=True)
    hift = hift.to(device).eval()
    hift.set_sine_waves(hfx["buf.sine_waves_prefix"].to(device))
    with torch.inference_mode():
        speech, _ = hift.inference(hfx["in.mel"].to(device), finalize=True)
    check("hift full.speech", max_diff(speech, hfx["full.speech"]), SOLVE)

    tfx = tensors("token2wav_tiny_fixtures.safetensors")
    trace = meta("token2wav_tiny_meta.json")
    prompt = FlowPrompt(on["in.prompt_token"], on["in.prompt_feat"], on["in.embedding"])
    for name, kw in (("stream", {"mode": "streaming"}), ("nonstream", {"mode": "offline"})):
        segment = Token2WavSegment(flow, hift, prompt, Token2WavConfig.tiny(), **kw)
        pieces = [p for t in trace["script_tokens"] for p in segment.push(int(t))]
        pieces += segment.finish()
        audio = torch.cat(pieces, dim=-1)
        same = audio.shape == tfx[f"{name}.speech"].shape
        check(f"token2wav {name}.speech", max_diff(audio, tfx[f"{name}.speech"]) if same
              else float("inf"), SOLVE)

    lfx = tensors("lm_tiny_fixtures.safetensors")
    lm = CosyVoice3LM(TINY_LM_CONFIG)
    lm.load_state_dict(tensors("lm_tiny_state_dict.safetensors.gz"), strict=True)
    lm = lm.to(device).eval()
    with torch.inference_mode():
        prefill = lm.prefill_embeds(lfx["in.text"][0].to(device),
                                    lfx["in.prompt_text"][0].to(device),
                                    lfx["in.prompt_speech_token"][0].to(device))
        min_len, max_len = length_limits(5)
        decoder = LMDecoder(lm, prefill, min_len, max_len, GreedySampler(81),
                            "reference_sos_only")
        steps = [decoder.step() for _ in range(20)]
    logits = torch.stack([s.logits for s in steps if s is not None])
    check("lm zs.greedy.logits (20 steps)", max_diff(logits, lfx["zs.greedy.logits"]), 1e-4)
    exact = decoder.tokens == lfx["zs.greedy.tokens"].tolist()
    checks["lm zs.greedy.tokens"] = {"exact": exact, "ok": exact}
    return {"environment": environment(device), "checks": checks,
            "ok": all(c["ok"] for c in checks.values())}


# ---- solve: replay vs eager ------------------------------------------------------------------

def padded_inputs(rows: int, bucket: int, real: int, dim_spk: int, device: str,
                  seed: int, streaming: bool = False) -> dict[str, Tensor]:
    """The served solve's static inputs (`FlowBucketRunner.pack`'s layout) for `rows` rows of
    `real` valid frames padded to `bucket`: mu, cond [R, 80, F] (zero past `real`), mask
    [R, 1, F], spks [R, 80], streaming bool [R]."""
    gen = torch.Generator().manual_seed(seed)
    mu = torch.zeros(rows, 80, bucket)
    mu[:, :, :real] = torch.randn(rows, 80, real, generator=gen)
    cond = torch.zeros(rows, 80, bucket)
    cond[:, :, : min(real, 20)] = torch.randn(rows, 80, min(real, 20), generator=gen)
    mask = torch.zeros(rows, 1, bucket)
    mask[:, :, :real] = 1
    spks = torch.randn(rows, dim_spk, generator=gen)
    flags = torch.full((rows,), streaming, dtype=torch.bool)
    return {k: v.to(device) for k, v in
            {"mu": mu, "cond": cond, "mask": mask, "spks": spks, "streaming": flags}.items()}


@dataclass
class SolvePlan:
    """What the solve step measures: frame buckets and batch sizes (captured while batch x
    frames <= `budget`), timed `repeats` times each, eager then replay; `profile` names the
    shapes (``b1/250``) whose eager solve is also profiled kernel by kernel; `save` is called
    with the record after every shape, so a step cut off by its time limit keeps what it
    measured."""

    device: str
    buckets: list[int]
    batches: list[int]
    budget: int
    repeats: int
    streaming: bool = False
    profile: set[str] = field(default_factory=set)
    save: Callable[[dict[str, Any]], None] = lambda record: None


def solve_step(plan: SolvePlan, tiny: bool, dtypes: list[str]) -> dict[str, Any]:
    """`solve_dtype` for each estimator dtype in `dtypes` (the same random weights, cast):
    {"dtypes": {name: record}, "bf16_vs_fp32_max_abs": {shape: diff} when both ran, "ok"}."""
    full_float32(torch.device(plan.device))  # TF32 off (spec §10), as the served flow
    torch.manual_seed(0)
    with torch.device(plan.device):
        flow = CausalMaskedDiffWithDiT(FlowConfig.tiny() if tiny else FlowConfig())
    flow = flow.to(plan.device).eval().requires_grad_(False)
    out: dict[str, Any] = {"dtypes": {}, "ok": False}
    eager: dict[str, dict[str, Tensor]] = {}
    for name in dtypes:
        flow.decoder.estimator.set_compute_dtype(ESTIMATOR_DTYPES[name])
        out["dtypes"][name] = {"estimator_dtype": name}
        eager[name] = solve_dtype(flow, plan, out["dtypes"][name], lambda: plan.save(out))
    if "float32" in eager and "bfloat16" in eager:
        out["bf16_vs_fp32_max_abs"] = {k: max_diff(v, eager["float32"][k])
                                       for k, v in eager["bfloat16"].items()}
    out["ok"] = all(r["ok"] for r in out["dtypes"].values())
    return out


def solve_dtype(flow: CausalMaskedDiffWithDiT, plan: SolvePlan, record: dict[str, Any],
                saved: Callable[[], None]) -> dict[str, Tensor]:
    """Capture, compare and time the solve per (batch, bucket) in the estimator's current
    dtype, filling `record` (see the module docstring; `saved()` after each shape). Returns
    each shape's eager mel."""
    device = plan.device
    tiny = flow.config.dim < FlowConfig().dim
    if device.startswith("cuda"):  # the previous dtype's graphs are gone: measure this one's
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)
    # the served solve (token2wav's FlowBucketRunner.forward), captured here shape by shape
    served = FlowBucketRunner(flow, plan.buckets, plan.batches, max(plan.batches), plan.budget,
                              True, device)
    forward = served.forward

    runner = GraphRunner(forward, enabled=True, device=device)
    shapes = [(b, f) for b in sorted(plan.batches, reverse=True)
              for f in sorted(plan.buckets, reverse=True) if b * f <= plan.budget]
    record.update({"environment": environment(device), "weights": "random, seed 0",
                   "size": "tiny" if tiny else "full", "streaming_mask": plan.streaming,
                   "budget_batch_frames": plan.budget, "repeats": plan.repeats,
                   "eager_reason": runner.eager_reason(), "shapes": {}, "ok": False})
    started = time.perf_counter()
    mels: dict[str, Tensor] = {}
    with torch.inference_mode():
        examples = {s: padded_inputs(s[0], s[1], max(s[1] - PAD, 1), 80, device, seed=s[1],
                                     streaming=plan.streaming) for s in shapes}
        for shape in shapes:  # largest first: smaller graphs reuse the pool
            runner.capture(shape, examples[shape])
        record["capture_s"] = time.perf_counter() - started
        record["capture_bytes"] = runner.capture_bytes
        saved()
        for shape in sorted(shapes):
            key = f"b{shape[0]}/{shape[1]}"
            entry = compare_and_time(runner, forward, shape, examples[shape], plan)
            if key in plan.profile:
                entry["eager_kernels"] = kernel_profile(lambda s=shape: forward(examples[s]),
                                                        device)
            record["shapes"][key] = entry
            mels[key] = entry.pop("mel")
            print(f"{flow.decoder.estimator.compute_dtype} "
                  f"b{shape[0]} {shape[1]} frames: eager {entry['eager_ms']:.1f} ms, "
                  f"replay {entry['replay_ms']:.1f} ms ({entry['status']}), bit-identical "
                  f"{entry['bit_identical']}", flush=True)
            saved()
    if device.startswith("cuda"):
        record["max_memory_allocated_bytes"] = torch.cuda.max_memory_allocated(device)
    record["ok"] = all(e["bit_identical"] and e["copy_outlives_next_replay"]
                       for e in record["shapes"].values())
    saved()
    return mels


def compare_and_time(runner: GraphRunner, forward: Callable[[dict[str, Tensor]], Tensor],
                     shape: tuple[int, int], inputs: dict[str, Tensor],
                     plan: SolvePlan) -> dict[str, Any]:
    """One shape: replay vs eager on the same padded inputs, a replay's copy outliving the
    next replay, then eager and replay timed (median ms of `plan.repeats`, synchronised).
    The eager mel is returned under ``"mel"``."""
    eager = forward(inputs)
    replay, replayed = runner.run(shape, inputs)
    entry: dict[str, Any] = {"status": runner.status.get(shape, "eager"), "replayed": replayed,
                             "bit_identical": bool(torch.equal(eager, replay)),
                             "max_abs_diff": max_diff(eager, replay), "mel": eager}
    # a second replay on other inputs must not change the first copy
    other = padded_inputs(shape[0], shape[1], max(shape[1] // 2, 1), 80, plan.device,
                          seed=shape[1] + 1, streaming=plan.streaming)
    kept = replay.clone()
    runner.run(shape, other)
    entry["copy_outlives_next_replay"] = bool(torch.equal(kept, replay))
    for mode in ("eager", "replay"):
        times = []
        for _ in range(plan.repeats):
            sync(plan.device)
            t0 = time.perf_counter()
            if mode == "eager":
                forward(inputs)
            else:
                runner.run(shape, inputs)
            sync(plan.device)
            times.append(time.perf_counter() - t0)
        entry[f"{mode}_ms"] = 1000 * statistics.median(times)
    entry["speedup"] = entry["eager_ms"] / entry["replay_ms"]
    return entry


def kernel_profile(call: Callable[[], Any], device: str, top: int = 12) -> dict[str, Any]:
    """One call under torch.profiler: the GPU kernels it launched (count, summed ms) and the
    `top` kernels by summed time, each with its count and ms. On a CPU, the CPU operators
    instead (``self`` time), so the dry run exercises the same code. Where a solve's time
    goes: kernel time near the replay time means the GPU is busy throughout, and the top
    names say with what."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    cuda = device.startswith("cuda")
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    sync(device)
    with profile(activities=activities) as prof:
        call()
        sync(device)
    totals: dict[str, list[float]] = {}
    for event in prof.events():
        if (event.device_type == DeviceType.CUDA) == cuda:
            if not cuda and event.cpu_parent is not None:
                continue  # top-level CPU operators only
            entry = totals.setdefault(event.name, [0, 0.0])
            entry[0] += 1
            entry[1] += event.time_range.elapsed_us() / 1000
    ranked = sorted(totals.items(), key=lambda kv: -kv[1][1])[:top]
    return {"what": "cuda kernels" if cuda else "top-level cpu operators",
            "count": int(sum(v[0] for v in totals.values())),
            "ms": round(sum(v[1] for v in totals.values()), 3),
            "top": [{"name": name[:140], "count": int(c), "ms": round(ms, 3)}
                    for name, (c, ms) in ranked]}


def merge(parts: list[Path]) -> dict[str, Any]:
    """{part file stem: its JSON} (a missing or unreadable part is recorded as such)."""
    out: dict[str, Any] = {}
    for path in parts:
        try:
            out[path.stem] = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            out[path.stem] = {"missing": f"{type(exc).__name__}: {exc}"}
    return out


def write_json(path: Path, record: dict[str, Any]) -> None:
    path.write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")


def ints(text: str) -> list[int]:
    return [int(v) for v in text.split(",") if v]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="step", required=True)
    p = sub.add_parser("parity", help="tiny fixtures on a device")
    p.add_argument("--device", default="cuda")
    p.add_argument("--out", required=True)
    s = sub.add_parser("solve", help="flow solve: capture, replay vs eager, timing")
    s.add_argument("--device", default="cuda")
    s.add_argument("--tiny", action="store_true", help="the tiny flow (a CPU smoke run)")
    s.add_argument("--buckets", default="100,250,500,1000,2000,4200")
    s.add_argument("--batches", default="1,8")
    s.add_argument("--budget", type=int, default=8192, help="most batch x frames captured")
    s.add_argument("--repeats", type=int, default=5)
    s.add_argument("--streaming", action="store_true", help="chunk-causal mask")
    s.add_argument("--dtypes", default="float32,bfloat16",
                   help="estimator dtypes to run, in order (estimator_dtype values)")
    s.add_argument("--profile", default="",
                   help="shapes whose eager solve is profiled kernel by kernel (b1/250,...)")
    s.add_argument("--out", required=True)
    m = sub.add_parser("merge", help="join JSON parts")
    m.add_argument("--out", required=True)
    m.add_argument("parts", nargs="*", type=Path)
    args = parser.parse_args()
    try:
        if args.step == "parity":
            record = parity(args.device)
        elif args.step == "solve":
            plan = SolvePlan(args.device, ints(args.buckets), ints(args.batches), args.budget,
                             args.repeats, args.streaming,
                             {k for k in args.profile.split(",") if k},
                             lambda part: write_json(Path(args.out), part))
            record = solve_step(plan, args.tiny, [d for d in args.dtypes.split(",") if d])
        else:
            record = merge(args.parts)
    except Exception as exc:  # noqa: BLE001 (the part records why it failed; others go on)
        import traceback

        traceback.print_exc()
        record = {"error": f"{type(exc).__name__}: {exc}", "ok": False}
    write_json(Path(args.out), record)
    ok = record.get("ok", True)
    print(f"{args.step}: {'ok' if ok else 'FAILED'} -> {args.out}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
