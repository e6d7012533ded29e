#!/usr/bin/env bash
# Every GPU check in one call (issue 37): on the bare GPU machine, install the carried wheels
# (benchmarks/gpu/wheels.sh made them) into a scratch folder, put it and the checkout on
# PYTHONPATH, and run benchmarks/gpu/run.py with the machine's own python3: seven steps, each
# under its own time limit, about 9 minutes in all, one summary table, one JSON ($OUT/gpu.json).
#
#   benchmarks/gpu/run.sh                    # on the GPU machine (benchmarks/gpu/README.md)
#   benchmarks/gpu/run.sh --only cv3-serve   # some steps again
#   benchmarks/gpu/run.sh --dry-run          # every step on the CPU at tiny sizes
#
# PY (default python3) is the interpreter; WHEELS (default .gpu-wheels/cpXY for that
# interpreter) the wheel folder; without one, the interpreter's own packages are used as they
# are (a dev venv).
set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$ROOT"
PY="${PY:-python3}"
TAG="$("$PY" -c 'import sys; print(f"cp{sys.version_info[0]}{sys.version_info[1]}")')" || exit 3
WHEELS="${WHEELS:-.gpu-wheels/$TAG}"
if compgen -G "$WHEELS/*.whl" > /dev/null; then
  SITE="$(mktemp -d "${TMPDIR:-/tmp}/voxflow-gpu-site.XXXXXX")"
  "$PY" -m pip install --quiet --disable-pip-version-check --no-index --no-deps --no-compile \
    --no-cache-dir --target "$SITE" "$WHEELS"/*.whl || { echo "wheel install failed" >&2; exit 3; }
  export PYTHONPATH="$SITE:$ROOT${PYTHONPATH:+:$PYTHONPATH}"
  echo "installed $(ls "$WHEELS" | wc -l) wheels from $WHEELS"
else
  echo "no wheels in $WHEELS: using $PY's own packages"
  export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
fi
export PYTHONUNBUFFERED=1
exec "$PY" benchmarks/gpu/run.py "$@"
