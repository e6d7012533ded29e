"""CPU timing of CosyVoice3's streamed flow calls per segment: full recompute of the whole prefix
at every hop (today's path, O(N²) in frames) vs the settled-frame DiT cache
(`voxflow.models.cosyvoice3.flow_cache`, spec §9.7 end). Not a test; prints a table.

Tiny fixture weights (tests/fixtures/cosyvoice3) and prompt (P = 7 tokens), random tokens, the
tiny §9.7 hop schedule (`HopSchedule` with `Token2WavConfig.tiny()`: 8, 10, 20, 20, ... tokens,
3 lookahead), batch 1, float32 by default. For a segment of N tokens it times every streamed
(non-final) chunk call the schedule makes as the tokens arrive: conditioning + solve, summed
(seconds, `time.perf_counter`). The final full-attention call is left out: it recomputes the
whole prefix on both paths (spec §9.7 item 4). Also prints the largest difference between the
frames each path produced (the cache must match within float rounding).

    flock /work/cpu.lock .venv/bin/python benchmarks/cosyvoice3_flow_cache.py --tokens 150,300,600
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch
from torch import Tensor

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "unit"))

from cosyvoice3_fixtures import tiny_flow, tiny_prompt  # noqa: E402

from voxflow.models.cosyvoice3.flow import CausalMaskedDiffWithDiT  # noqa: E402
from voxflow.models.cosyvoice3.flow_cache import (  # noqa: E402
    SettledFlowCache,
    solve_streamed_chunk,
)
from voxflow.models.cosyvoice3.token2wav import (  # noqa: E402
    FlowPrompt,
    HopSchedule,
    Token2WavConfig,
)


def calls_of(prompt_tokens: int, n_tokens: int) -> list[int]:
    """Token counts (target tokens, lookahead included) of the segment's streamed calls."""
    schedule = HopSchedule(Token2WavConfig.tiny(), prompt_tokens)
    return [n for k in range(1, n_tokens + 1) for n, _, _ in schedule.take_due(k)]


@torch.inference_mode()
def run_segment(flow: CausalMaskedDiffWithDiT, prompt: FlowPrompt, token: Tensor,
                calls: list[int], cached: bool) -> tuple[float, Tensor]:
    """(seconds over all streamed calls, mel [1, 80, settled frames] the calls produced)."""
    cache = SettledFlowCache(flow.decoder.estimator) if cached else None
    pieces: list[Tensor] = []
    done = 0
    elapsed = 0.0
    for n in calls:
        begin = time.perf_counter()
        c = flow.conditioning(token[:, :n], prompt.prompt_token, prompt.prompt_feat,
                              prompt.embedding, finalize=False)
        if cache is None:
            mel = flow.decoder(c.mu, c.mask, c.spks, c.cond, streaming=True)[:, :, done:]
        else:
            mel = solve_streamed_chunk(flow.decoder, c, cache)
        elapsed += time.perf_counter() - begin
        pieces.append(mel)
        done = c.mu.shape[2]
    return elapsed, torch.cat(pieces, dim=2)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tokens", default="150,300,600", help="segment lengths (tokens)")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    parser.add_argument("--dtype", choices=("float32", "bfloat16"), default="float32")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    flow = tiny_flow()
    flow.decoder.estimator.set_compute_dtype(getattr(torch, args.dtype))
    prompt = tiny_prompt()
    p = prompt.prompt_token.shape[1]
    print(f"tiny flow, {args.dtype}, CPU, {args.threads} thread(s), prompt {p} tokens; "
          "streamed calls only (conditioning + solve), seconds per segment")
    print(f"{'tokens':>6} {'calls':>5} {'frames':>6} {'full s':>8} {'cache s':>8} {'speedup':>7}"
          f" {'max |diff|':>10}")
    for n_tokens in (int(v) for v in args.tokens.split(",")):
        token = torch.randint(0, 81, (1, n_tokens), dtype=torch.int32,
                              generator=torch.Generator().manual_seed(args.seed))
        calls = calls_of(p, n_tokens)
        run_segment(flow, prompt, token, calls[:2], cached=True)  # warm-up
        full_s, full_mel = run_segment(flow, prompt, token, calls, cached=False)
        cache_s, cache_mel = run_segment(flow, prompt, token, calls, cached=True)
        diff = float((full_mel.double() - cache_mel.double()).abs().max())
        print(f"{n_tokens:>6} {len(calls):>5} {full_mel.shape[2]:>6} {full_s:>8.3f} "
              f"{cache_s:>8.3f} {full_s / cache_s:>6.1f}x {diff:>10.2e}")


if __name__ == "__main__":
    main()
