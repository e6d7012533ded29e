#!/usr/bin/env bash
# NanoCodec on one GPU (issue 12, spec §1 item 8): one run of under 5 minutes on an H200, one
# JSON out ($OUT_DIR/nanocodec_gpu.json):
#
#   1. decode   benchmarks/nanocodec_cpu.py on cuda, full-size random weights (TF32 off), 64
#               frames (3 s): one-shot vs streamed through the codec stage's chunk step
#               (ChunkStep) at 1, 2, 4 and 8 frames, one stream and 8 streams per step, eager
#               and replayed from a CUDA graph captured per (rows, chunk length) with the
#               engine's GraphRunner; RTFx, ratio to one-shot (issue 12: >= 0.9 at 4), codec
#               TTFA, host<->device copies and host syncs inside one chunk step (goal 0);
#               replay vs eager on the same codes and chunking (bit-identical expected) and a
#               rerun of the replay (bit-identical), for 1 and 8 streams
#   2. facts    commit, GPU name and driver merged into the same JSON
#
# The step has a time limit (STEP_DECODE, 270 s); a failed step still leaves a JSON saying so.
# Random weights: the audio is noise, only times and identity count.
#
#   benchmarks/gpu/nanocodec.sh [--out-dir DIR]   # on the GPU machine
#   benchmarks/gpu/nanocodec.sh --dry-run          # anywhere: the same path on the CPU, tiny
#
# --dry-run prints the GPU command, then runs the same script on the CPU with the tiny decoder,
# 16 frames, 2 streams per batch and one repeat (a few seconds; nothing is captured off CUDA, so replay is eager
# there and the comparison only checks the script), and writes the JSON the same way.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$ROOT"
PY="${PY:-.venv/bin/python}"
OUT_DIR="${OUT_DIR:-nanocodec_gpu}"
DRY_RUN=0
STEP_DECODE=270     # seconds
while [ $# -gt 0 ]; do
  case "$1" in
    --dry-run) DRY_RUN=1 ;;
    --out-dir) OUT_DIR="$2"; shift ;;
    -h|--help) sed -n '2,23p' "$0"; exit 0 ;;
    *) echo "unknown argument: $1" >&2; exit 2 ;;
  esac
  shift
done
mkdir -p "$OUT_DIR"
OUT="$OUT_DIR/nanocodec_gpu.json"
DECODE=("$PY" benchmarks/nanocodec_cpu.py --device cuda --graphs --check-replay
        --chunks 1,2,4,8 --batch 8 --frames 64 --warmup 2 --repeats 10 --out "$OUT")

if [ "$DRY_RUN" = 1 ]; then
  printf 'GPU step: timeout %s' "$STEP_DECODE"; printf ' %q' "${DECODE[@]}"; echo
  DECODE=("$PY" benchmarks/nanocodec_cpu.py --device cpu --graphs --check-replay --tiny
          --chunks 1,2,4,8 --batch 2 --frames 16 --warmup 1 --repeats 1 --out "$OUT")
fi

started=$(date +%s)
status() { echo "[$(( $(date +%s) - started )) s] $*"; }
status "1/2 decode: one-shot vs streamed, eager and replayed"
rc=0
timeout "$STEP_DECODE" "${DECODE[@]}" > "$OUT_DIR/decode.log" 2>&1 || rc=$?
[ "$rc" = 0 ] || status "decode failed or timed out (rc $rc; see $OUT_DIR/decode.log)"

status "2/2 facts"
gpu=$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1 || true)
"$PY" - "$OUT" "$rc" "$(git rev-parse HEAD)" "$gpu" "$DRY_RUN" <<'EOF'
import json, os, sys
out, rc, commit, gpu, dry = sys.argv[1:6]
doc = json.load(open(out)) if os.path.exists(out) and rc == "0" else {"failed": f"rc {rc}"}
doc["facts"] = {"commit": commit, "nvidia_smi": gpu or None, "dry_run": dry == "1",
                "weights": f"{doc.get('decoder', '?')}-size random: noise, only times and "
                           "identity count"}
json.dump(doc, open(out, "w"), indent=2)
s = doc.get("streamed", {})
for mode in ("eager:4", "graph:4", "eager:4x8", "graph:4x8"):
    if mode in s:
        r = s[mode]
        print(f"{mode}: RTFx {r['rtfx']:.1f} ({r['ratio_to_one_shot']:.2f} of one-shot), "
              f"TTFA {r['ttfa_ms']:.2f} ms, copies {r['host_device_copies']}, "
              f"syncs {r['host_syncs']}")
for chunk, r in doc.get("replay_vs_eager", {}).items():
    print(f"replay vs eager at {chunk} (frames x streams): captured {r['captured']}, identical {r['bit_identical']}, "
          f"max diff {r['max_abs_diff']:.3g}, rerun identical {r['rerun_bit_identical']}")
EOF
status "done: $OUT"
exit "$rc"
