#!/usr/bin/env bash
# Fetch, on a machine with a package registry, the wheels the GPU machine lacks (issue 37): the
# packages of benchmarks/gpu/wheels.txt as binary wheels for CPython PY on manylinux x86-64,
# without their dependencies (wheels.txt lists every one), into a git-ignored folder that
# travels with the working tree (`carry` it) and that benchmarks/gpu/run.sh installs there with
# `pip install --no-index --target`. Fails if the folder passes MAX_MIB (40).
#
#   benchmarks/gpu/wheels.sh                 # CPython 3.12 (the GPU machine) -> .gpu-wheels/cp312
#   benchmarks/gpu/wheels.sh --python 3.11   # this Python, for `make gpu-rehearsal`
#   benchmarks/gpu/wheels.sh --python 3.12 --dest DIR
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$ROOT"
PYVER=3.12
DEST=""
MAX_MIB=40
PIP="${PIP:-python3 -m pip}"
while [ $# -gt 0 ]; do
  case "$1" in
    --python) PYVER="$2"; shift ;;
    --dest) DEST="$2"; shift ;;
    -h|--help) sed -n '2,12p' "$0"; exit 0 ;;
    *) echo "unknown argument: $1" >&2; exit 2 ;;
  esac
  shift
done
TAG="cp${PYVER/./}"
DEST="${DEST:-.gpu-wheels/$TAG}"
mkdir -p "$DEST"
PLATFORMS=()
for p in manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_17_x86_64 manylinux2014_x86_64 \
         manylinux_2_12_x86_64 manylinux2010_x86_64 manylinux_2_5_x86_64 manylinux1_x86_64 any; do
  PLATFORMS+=(--platform "$p")
done
# shellcheck disable=SC2086
$PIP download --quiet --disable-pip-version-check --no-deps --only-binary=:all: \
  --python-version "$PYVER" --implementation cp "${PLATFORMS[@]}" \
  -r benchmarks/gpu/wheels.txt -d "$DEST" 2>&1 | grep -v "^WARNING: Location" || true
# every pinned package must be there (pip download's status is lost in the pipe above)
missing=0
while read -r req; do
  name="${req%%==*}"; version="${req##*==}"
  norm="$(echo "$name" | tr 'A-Z.-' 'a-z__')"   # a wheel's name part: lower case, _ for - and .
  if ! ls "$DEST" | tr 'A-Z' 'a-z' | grep -qF "${norm}-${version}-"; then
    echo "missing wheel: $req for CPython $PYVER" >&2; missing=1
  fi
done < <(grep -v '^\s*#' benchmarks/gpu/wheels.txt | grep -v '^\s*$')
[ "$missing" = 0 ] || exit 1
kib=$(du -sk "$DEST" | cut -f1)
echo "$DEST: $(ls "$DEST" | wc -l) wheels, $((kib / 1024)) MiB (at most $MAX_MIB)"
[ "$kib" -le $((MAX_MIB * 1024)) ] || { echo "wheel folder over $MAX_MIB MiB" >&2; exit 1; }
