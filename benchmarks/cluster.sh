#!/usr/bin/env bash
# A Ray cluster of two nodes on this machine, and one lost under an open-loop load (issue 45):
#   bash benchmarks/cluster.sh [OUT_DIR] [--rate R] [--duration S] [--kill-at S] [--back-after S]
# Each node is its own `ray start` (one CPU, a resource naming it, token authentication); two
# replicas of configs/piper.yaml, one a node; Serve's proxy on the head. The bench runs twice at
# the same rate: both nodes up throughout, then the second node SIGKILLed part way and started
# again (benchmarks/cluster_loss.py). Needs the ray extra (`make install-test` has it). About
# 3 minutes. The same steps on real machines: docs/scale-out.md, "A cluster".
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-bench-cluster}
shift || true
PYTHONPATH=. exec .venv/bin/python benchmarks/cluster_loss.py --out "$OUT" "$@"
