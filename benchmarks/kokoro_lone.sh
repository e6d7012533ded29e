#!/usr/bin/env bash
# Issue 17's measurement, from the repository root, on an otherwise idle machine:
#   bash benchmarks/kokoro_lone.sh [BASE_COMMIT] [OUT_DIR]     (about 15 minutes on 2 cores)
# A lone Kokoro request (jm_kumo, the three-sentence input of benchmarks/data/case_three.txt,
# streamed pcm) and four at a time: BASE_COMMIT's server (a temporary git worktree, default
# 041af3b, the commit issue 17 was measured on) against this checkout's, each from its own
# configs/multi.yaml, three starts each, rotated (bench compare). The same for the paragraph
# case (five sentences) at concurrency 1. JSON into OUT_DIR (default bench-kokoro-lone/).
set -euo pipefail
BASE=${1:-041af3b}
OUT=${2:-bench-kokoro-lone}
mkdir -p "$OUT"
V=$PWD/.venv/bin
WT=$(mktemp -d)/base
git worktree add --detach "$WT" "$BASE" >/dev/null
trap 'git worktree remove --force "$WT"' EXIT
SERVE="$V/python -m voxflow serve --config configs/multi.yaml --port {port}"
COMMON=(--arm "base=$SERVE" --arm-cwd "base=$WT" --arm "new=$SERVE" --runs 3
        --model kokoro --voice jm_kumo --format pcm --idle-timeout 300)
# the base arm imports voxflow from its worktree (python -m from its cwd), the new arm from here
echo "== three sentences, concurrency 1 and 4"
"$V/voxflow" bench compare "${COMMON[@]}" --sentences benchmarks/data/case_three.txt --concurrency 1,4 --per-level 5 \
  --out "$OUT/three.json"
echo "== paragraph (five sentences), concurrency 1"
"$V/voxflow" bench compare "${COMMON[@]}" --case paragraph --concurrency 1 --per-level 5 \
  --out "$OUT/paragraph.json"
