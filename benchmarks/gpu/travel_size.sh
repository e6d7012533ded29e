#!/usr/bin/env bash
# The size of what the device tool sends to the GPU machine (issue 37): the files git tracks or
# would track (untracked, not ignored) plus the carried paths given as arguments (the wheel
# folder). Prints MiB; fails over LIMIT_MIB (64, the tool's cap).
#
#   benchmarks/gpu/travel_size.sh .gpu-wheels/cp312
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
LIMIT_MIB=64
tree_kib=$(git ls-files -z --cached --others --exclude-standard | du -skc --files0-from=- | tail -1 | cut -f1)
carried_kib=0
for path in "$@"; do
  [ -e "$path" ] || { echo "carried path missing: $path" >&2; exit 1; }
  carried_kib=$((carried_kib + $(du -sk "$path" | cut -f1)))
done
total=$((tree_kib + carried_kib))
echo "travelling tree: $((tree_kib / 1024)) MiB of files + $((carried_kib / 1024)) MiB carried ($*) = $((total / 1024)) MiB (limit $LIMIT_MIB)"
[ "$total" -le $((LIMIT_MIB * 1024)) ] || { echo "over $LIMIT_MIB MiB: it would not travel" >&2; exit 1; }
