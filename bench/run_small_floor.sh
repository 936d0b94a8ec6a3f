#!/usr/bin/env bash
# The floor under issue 14's small-file goals: how close to local tmpfs can one
# request per file get on this machine? Per round, in the same run:
#   * local: `gust bench md -n N --size 4096 -p 4 --no-excl --target posix:DIR`;
#   * the bare transport: bench/uds_pingpong.c with 4 clients and 4 servers that
#     answer at once (the shape of 4 processes on a 4-daemon instance on one node),
#     and with 4 pairs;
#   * GustFS: the same bench through the preload library on a 4-daemon instance.
# The ceiling of a phase that costs one round trip per file is pingpong/local: what
# a client and daemons doing nothing but the round trip would reach.
# Usage: bench/run_small_floor.sh [rounds]   (JSON lines in
# bench/results/small-floor-<date>.json, a markdown table of medians on stdout).
set -euo pipefail
# shellcheck source=lib.sh
. "$(dirname "$0")/lib.sh"
cd "$BENCH_ROOT"
rounds=${1:-3}
files=${BENCH_FILES:-2000}
base=${BENCH_DIR:-/dev/shm}/gust-floor.$$
bench_scratch "$base"
mkdir -p "$base/local"
out=$(bench_result small-floor)
pp=$base/uds_pingpong
cc -O2 -o "$pp" bench/uds_pingpong.c
: > "$out"
bench_start "$GUST" 4 "$base/inst"
for r in $(seq 1 "$rounds"); do
  gust_json=$(GUST_HOSTS_FILE="$base/inst/gust.hosts" "$GUST" bench md -n "$files" --size 4096 -p 4 --runs 1 \
    --no-excl --target preload --baseline "$base/local" --json)
  rt44=$("$pp" 4 100000 4 | awk '{print $(NF-2)}')
  rt4=$("$pp" 4 100000 | awk '{print $(NF-2)}')
  bench_stats record "$out" round:="$r" pingpong_4x4:="$rt44" pingpong_pairs:="$rt4" md:="$gust_json"
  echo "round $r done" >&2
done
bench_py - "$out" <<'PY'
import sys
from stats import local_rate, median as med, rate, read_jsonl
rows = read_jsonl(sys.argv[1])
print(f"bare round trips/s: 4 clients x 4 servers {med(r['pingpong_4x4'] for r in rows):,.0f}, "
      f"4 pairs {med(r['pingpong_pairs'] for r in rows):,.0f}")
print("| phase | local ops/s | GustFS ops/s | GustFS/local | ceiling: 4x4 round trips/local | GustFS/ceiling |")
print("|---|---:|---:|---:|---:|---:|")
for name in ("create", "stat", "read", "remove"):
    loc, gus, ceil, ratio = [], [], [], []
    for r in rows:
        ph = [p for p in r["md"]["phases"] if p["phase"] == name][0]
        g = rate(ph, "preload")
        l = local_rate(ph)
        loc.append(l); gus.append(g); ratio.append(g / l); ceil.append(r["pingpong_4x4"] / l)
    print(f"| {name} | {med(loc):,.0f} | {med(gus):,.0f} | {med(ratio):.3f} | {med(ceil):.3f} | "
          f"{med(g / (c * l) for g, c, l in zip(gus, ceil, loc)):.2f} |")
print(f"results: {sys.argv[1]}", file=sys.stderr)
PY
