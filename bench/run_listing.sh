#!/usr/bin/env bash
# Listings with attributes (issue 14): `ls -l` of a directory of N entries (default
# 100,000) through the LD_PRELOAD library and through the FUSE mount, for this build
# and a previous one (BASE_BIN: a directory with that build's `gust` and
# `libgust_preload.so`), 4 daemons, each build on its own instance holding the same
# files; rounds alternate builds. Prints the median seconds of each and the ratios.
# Usage: BASE_BIN=dir bench/run_listing.sh [rounds]   (results in
# bench/results/listing-<date>.json). Storage: BENCH_DIR (default /dev/shm).
set -euo pipefail
# shellcheck source=lib.sh
. "$(dirname "$0")/lib.sh"
cd "$BENCH_ROOT"
rounds=${1:-3}
n=${BENCH_ENTRIES:-100000}
base_bin=${BASE_BIN:?set BASE_BIN to a directory with the previous gust and libgust_preload.so}
base=${BENCH_DIR:-/dev/shm}/gust-listing.$$
bench_scratch "$base"
mkdir -p "$base"
out=$(bench_result listing)
declare -A bin=([new]="$GUST" [old]="$base_bin/gust")
for v in new old; do
  b=${bin[$v]}
  bench_start "$b" 4 "$base/$v"
  mkdir -p "$base/$v.mnt"
  GUST_HOSTS_FILE="$base/$v/gust.hosts" bench_mount "$b" "$base/$v.mnt" --log "$base/$v.mount.log"
  # The same N empty files in both (through the preload library: one request each).
  GUST_HOSTS_FILE="$base/$v/gust.hosts" "$b" run -- python3 -c "
import os
os.mkdir('/gustfs/d')
for i in range($n):
    os.close(os.open(f'/gustfs/d/f{i:07d}', os.O_CREAT | os.O_WRONLY, 0o644))
"
done
: > "$out"
for r in $(seq 1 "$rounds"); do
  for v in new old; do
    b=${bin[$v]}
    pre=$(GUST_HOSTS_FILE="$base/$v/gust.hosts" bench_time "$b" run -- ls -l /gustfs/d)
    fuse=$(bench_time ls -l "$base/$v.mnt/d")
    lines=$(ls -l "$base/$v.mnt/d" | wc -l)
    bench_stats record "$out" build="$v" round:="$r" entries:="$n" listed:="$((lines - 1))" preload_s:="$pre" fuse_s:="$fuse"
  done
  echo "round $r done" >&2
done
bench_py - "$out" <<'PY'
import sys
from stats import median, paired, read_jsonl
rows = read_jsonl(sys.argv[1])
med = lambda v, k: median(r[k] for r in rows if r["build"] == v)
print("| front end | previous (s) | new (s) | previous/new (median of rounds) | per round |")
print("|---|---:|---:|---:|---|")
for k, name in [("preload_s", "LD_PRELOAD"), ("fuse_s", "FUSE")]:
    rounds = sorted(set(r["round"] for r in rows))
    of = lambda b: [[r[k] for r in rows if r["round"] == i and r["build"] == b][0] for i in rounds]
    p = paired(of("old"), of("new"))
    print(f"| {name} | {med('old', k):.2f} | {med('new', k):.2f} | {p.median:.1f} | {' '.join(f'{x:.1f}' for x in p.ratios)} |")
print(f"results: {sys.argv[1]}", file=sys.stderr)
PY
