#!/usr/bin/env bash
# Worker threads per daemon when several daemons share one machine's cores
# (`gust start --local N`): `gust bench md` (4 KiB files, mdtest's flags, 4
# processes through the preload library, against local tmpfs in the same run) on
# 4 daemons with each count of THREADS (default "8 2 1": 8 was the default before
# `--local N` shared it, 2 is what 4 daemons get on 2 cores now), rounds
# alternating the counts. Rates and ratios to local: medians of the rounds.
# Usage: bench/run_threads.sh [rounds]  (JSON lines in bench/results/threads-<date>.json)
set -euo pipefail
# shellcheck source=lib.sh
. "$(dirname "$0")/lib.sh"
cd "$BENCH_ROOT"
bench_build --workspace
rounds=${1:-3}
counts=${THREADS:-8 2 1}
base=${BENCH_DIR:-/dev/shm}/gust-threads.$$
bench_scratch "$base"
mkdir -p "$base/local"
out=$(bench_result threads)
: > "$out"
for r in $(seq "$rounds"); do
  for t in $counts; do
    bench_start "$GUST" 4 "$base/fs$t" --threads "$t"
    json=$(GUST_HOSTS_FILE="$base/fs$t/gust.hosts" "$GUST" bench md -n 2000 --size 4096 -p 4 --runs 1 \
      --target preload --baseline "$base/local" --json --no-excl)
    bench_stop "$GUST" "$base/fs$t"
    rm -rf "$base/fs$t"
    bench_stats record "$out" round:="$r" threads:="$t" result:="$json"
  done
done
bench_py - "$out" <<'PY'
import sys
from stats import median, rate, read_jsonl
rows = read_jsonl(sys.argv[1])
counts = sorted({r["threads"] for r in rows}, reverse=True)
phases = [p["phase"] for p in rows[0]["result"]["phases"]]
print(f"4 daemons, gust bench md -n 2000 --size 4096 -p 4 --target preload --no-excl, medians of {len(rows) // len(counts)} rounds")
print("| threads per daemon | " + " | ".join(f"{p} ops/s (/local)" for p in phases) + " |")
print("|---:|" + "---:|" * len(phases))
for t in counts:
    cells = []
    for p in phases:
        got = [next(x for x in r["result"]["phases"] if x["phase"] == p) for r in rows if r["threads"] == t]
        cells.append(f"{median(rate(g, 'preload') for g in got):,.0f} ({median(g['ratio'] for g in got):.3f})")
    print(f"| {t} | " + " | ".join(cells) + " |")
print(f"results: {sys.argv[1]}", file=sys.stderr)
PY
