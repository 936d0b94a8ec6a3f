#!/usr/bin/env bash
# Wide striping against local placement on this node (issue 31): `gust bench io`
# (file per process, 1 MiB transfers, P processes x BLOCK) on a fresh 4-daemon
# instance on /dev/shm for each placement, tmpfs measured in the same invocation
# (--baseline). Rounds alternate which placement goes first. Prints one line per
# round and placement: write and read MiB/s and their ratio to tmpfs.
# Usage: bench/run_placement.sh [rounds] [procs] [block]
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/env.sh
cargo build --release -p gust-cli >/dev/null
rounds=${1:-3} procs=${2:-2} block=${3:-256MiB}
base=${BENCH_DIR:-/dev/shm}/gust-placement.$$
trap 'for p in wide local; do "$GUST" stop --rootdir "$base-$p" >/dev/null 2>&1 || true; done; rm -rf "$base"*' EXIT
for round in $(seq 1 "$rounds"); do
  if (( round % 2 )); then order="wide local"; else order="local wide"; fi
  for p in $order; do
    mkdir -p "$base-tmpfs"
    "$GUST" start --local 4 --placement "$p" --rootdir "$base-$p" >/dev/null
    GUST_HOSTS_FILE=$base-$p/gust.hosts "$GUST" bench io -p "$procs" -b "$block" -t 1MiB --baseline "$base-tmpfs" --json |
      python3 -c "
import json, sys
j = json.load(sys.stdin)
cells = []
for ph in j['phases']:
    g = ph['gust']['median_rate']
    l = [v for k, v in ph.items() if k not in ('phase', 'gust')][0]['median_rate']
    cells.append(f\"{ph['phase']} {g:,.0f} MiB/s ({g / l:.2f} of tmpfs)\")
print('round $round $p: ' + ', '.join(cells))"
    "$GUST" stop --rootdir "$base-$p" >/dev/null 2>&1
    rm -rf "$base-tmpfs"
  done
done
