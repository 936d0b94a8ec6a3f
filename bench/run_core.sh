#!/usr/bin/env bash
# Benchmarks of the core issue: client-core API against the local file system,
# measured in the same run. For each daemon count (1, 4) and process count (1, 2, 4):
#   md: create/stat/read/remove of N 0-byte files per process, one dir per process
#   io: sequential 1 MiB writes then verified reads, file per process
# Both GustFS root directories and the baseline live on the same storage (default
# /dev/shm: node-local memory, as on a diskless compute node; BENCH_DIR overrides).
# Usage: bench/run_core.sh [runs]     (results: bench/results/core-<date>.json)
set -euo pipefail
# shellcheck source=lib.sh
. "$(dirname "$0")/lib.sh"
cd "$BENCH_ROOT"
bench_build -p gust-cli
runs=${1:-3}
files=${BENCH_FILES:-10000}
block=${BENCH_BLOCK:-256MiB}
base=${BENCH_DIR:-/dev/shm}/gust-bench.$$
bench_scratch "$base"
mkdir -p "$base/local"
out=$(bench_result core)
echo "[" > "$out"
first=1
for d in 1 4; do
  bench_start "$GUST" "$d" "$base/fs"
  export GUST_HOSTS_FILE="$base/fs/gust.hosts"
  for p in 1 2 4; do
    for kind in md io; do
      if [ "$kind" = md ]; then
        args=(md -n "$files" -p "$p")
      else
        args=(io -b "$block" -t 1MiB -p "$p")
      fi
      json=$("$GUST" bench "${args[@]}" --runs "$runs" --baseline "$base/local" --json)
      [ $first = 1 ] || echo "," >> "$out"
      first=0
      printf '{"daemons": %d, "procs": %d, "result": %s}\n' "$d" "$p" "$json" >> "$out"
      echo "daemons=$d procs=$p $kind:" >&2
      echo "$json" | bench_py -c '
import json, sys
from stats import rate, targets
r = json.load(sys.stdin)
for ph in r["phases"]:
    print("  %-7s gust %12.1f  local %12.1f  ratio %.3f %s" % (ph["phase"], rate(ph, "gust"), rate(ph, targets(ph)[1]), ph.get("ratio", 0), r["unit"]))
' >&2
    done
  done
  bench_stop "$GUST" "$base/fs"
done
echo "]" >> "$out"
echo "results: $out" >&2
