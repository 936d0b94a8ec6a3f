#!/usr/bin/env bash
# Wide striping against local placement on this node (issue 31): `gust bench io`
# (file per process, 1 MiB transfers, P processes x BLOCK) on a fresh 4-daemon
# instance on /dev/shm for each placement, tmpfs measured in the same invocation
# (--baseline). Rounds alternate which placement goes first. Prints one line per
# round and placement: write and read MiB/s and their ratio to tmpfs.
# Usage: bench/run_placement.sh [rounds] [procs] [block]
set -euo pipefail
# shellcheck source=lib.sh
. "$(dirname "$0")/lib.sh"
cd "$BENCH_ROOT"
bench_build -p gust-cli
rounds=${1:-3} procs=${2:-2} block=${3:-256MiB}
base=${BENCH_DIR:-/dev/shm}/gust-placement.$$
bench_scratch "$base"
for round in $(seq 1 "$rounds"); do
  for p in $(bench_abba "$round" wide local); do
    mkdir -p "$base/tmpfs"
    bench_start "$GUST" 4 "$base/$p" --placement "$p"
    GUST_HOSTS_FILE=$base/$p/gust.hosts "$GUST" bench io -p "$procs" -b "$block" -t 1MiB --baseline "$base/tmpfs" --json |
      bench_py -c "
import json, sys
from stats import local_rate, rate
j = json.load(sys.stdin)
cells = []
for ph in j['phases']:
    g = rate(ph, 'gust')
    l = local_rate(ph)
    cells.append(f\"{ph['phase']} {g:,.0f} MiB/s ({g / l:.2f} of tmpfs)\")
print('round $round $p: ' + ', '.join(cells))"
    bench_stop "$GUST" "$base/$p"
    rm -rf "$base/tmpfs"
  done
done
