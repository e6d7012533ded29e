#!/usr/bin/env bash
# Issue 44 ("jobs run behind interactive requests"): the TTFA of interactive streamed requests
# on an idle server, then on the same server while a long-form job runs, with `voxflow bench`.
#
#   benchmarks/jobs_ttfa.sh [CONFIG] [PORT]     (default configs/piper.yaml, 8890)
#
# The job is benchmarks' sentences.txt repeated 200 times (about 640,000 characters, over 10
# minutes of synthesis on 2 cores), so it runs through the whole second measure (its state is
# printed after: it must still be running); it is deleted after. Both measures: `bench run --case line --concurrency 1 --per-level 20 --repeats 3
# --stream --format pcm`; the busy one with `--allow-busy --idle-timeout 1` (the job keeps
# the CPU busy, which the idle gate would otherwise wait out). Prints both tables; the records go to $OUT (default a new
# temporary folder).
set -euo pipefail
cd "$(dirname "$0")/.."
CONFIG=${1:-configs/piper.yaml}
PORT=${2:-8890}
OUT=${OUT:-$(mktemp -d)}
VOXFLOW=.venv/bin/voxflow
URL=http://127.0.0.1:$PORT
JOBS_DIR=$(mktemp -d)
$VOXFLOW serve --config "$CONFIG" --port "$PORT" --set jobs.enabled=true \
  --set "jobs.directory=$JOBS_DIR" >"$OUT/server.log" 2>&1 &
SERVER=$!
trap 'kill $SERVER 2>/dev/null || true; wait $SERVER 2>/dev/null || true; rm -rf "$JOBS_DIR"' EXIT
for _ in $(seq 120); do curl -sf "$URL/health" >/dev/null && break; sleep 0.5; done
BENCH=(bench run --url "$URL" --case line --concurrency 1 --per-level 20 --repeats 3
       --stream --format pcm)
echo "== idle server"
$VOXFLOW "${BENCH[@]}" --out "$OUT/idle.json" | tail -3
.venv/bin/python - "$URL" "$OUT/job-id" <<'PY'
import json, sys, pathlib, httpx
text = "\n".join([pathlib.Path("benchmarks/data/sentences.txt").read_text()] * 200)
model = httpx.get(f"{sys.argv[1]}/v1/models").json()["data"][0]
r = httpx.post(f"{sys.argv[1]}/v1/audio/jobs", json={"model": model["id"], "input": text,
               "voice": model["voices"][0],
               "response_format": "mp3"}, timeout=30)
if r.status_code != 201:
    sys.exit(f"POST /v1/audio/jobs: {r.status_code} {r.text}")
pathlib.Path(sys.argv[2]).write_text(r.json()["id"])
print(f"job {r.json()['id']}: {len(text)} characters")
PY
JOB=$(cat "$OUT/job-id")
sleep 2
echo "== while job $JOB runs"
$VOXFLOW "${BENCH[@]}" --allow-busy --idle-timeout 1 --out "$OUT/busy.json" | tail -3
curl -sf "$URL/v1/audio/jobs/$JOB" | .venv/bin/python -c \
  'import json,sys; j=json.load(sys.stdin); print("job", j["state"], j["progress"])'
curl -sf -X DELETE "$URL/v1/audio/jobs/$JOB" >/dev/null
echo "records in $OUT"
