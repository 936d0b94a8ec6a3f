#!/usr/bin/env bash
# Benchmarks of the core issue: client-core API against the local file system,
# measured in the same run. For each daemon count (1, 4) and process count (1, 2, 4):
#   md: create/stat/read/remove of N 0-byte files per process, one dir per process
#   io: sequential 1 MiB writes then verified reads, file per process
# Both GustFS root directories and the baseline live on the same storage (default
# /dev/shm: node-local memory, as on a diskless compute node; BENCH_DIR overrides).
# Usage: bench/run_core.sh [runs]     (results: bench/results/core-<date>.json)
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/env.sh
cargo build --release -p gust-cli >/dev/null
runs=${1:-3}
files=${BENCH_FILES:-10000}
block=${BENCH_BLOCK:-256MiB}
base=${BENCH_DIR:-/dev/shm}/gust-bench.$$
mkdir -p "$base/local" bench/results
out=bench/results/core-$(date +%Y%m%d-%H%M).json
echo "[" > "$out"
first=1
trap '"$GUST" stop --rootdir "$base/fs" >/dev/null 2>&1 || true; rm -rf "$base"' EXIT
for d in 1 4; do
  "$GUST" start --local "$d" --rootdir "$base/fs" >/dev/null
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
      echo "$json" | python3 -c '
import json, sys
r = json.load(sys.stdin)
for ph in r["phases"]:
    t = [k for k in ph if k not in ("phase", "ratio")]
    print("  %-7s gust %12.1f  local %12.1f  ratio %.3f %s" % (ph["phase"], ph["gust"]["median_rate"], ph[t[1]]["median_rate"], ph.get("ratio", 0), r["unit"]))
' >&2
    done
  done
  "$GUST" stop --rootdir "$base/fs" >/dev/null
done
echo "]" >> "$out"
echo "results: $out" >&2
