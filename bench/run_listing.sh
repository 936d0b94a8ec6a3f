#!/usr/bin/env bash
# Listings with attributes (issue 14): `ls -l` of a directory of N entries (default
# 100,000) through the LD_PRELOAD library and through the FUSE mount, for this build
# and a previous one (BASE_BIN: a directory with that build's `gust` and
# `libgust_preload.so`), 4 daemons, each build on its own instance holding the same
# files; rounds alternate builds. Prints the median seconds of each and the ratios.
# Usage: BASE_BIN=dir bench/run_listing.sh [rounds]   (results in
# bench/results/listing-<date>.json). Storage: BENCH_DIR (default /dev/shm).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/env.sh
rounds=${1:-3}
n=${BENCH_ENTRIES:-100000}
base_bin=${BASE_BIN:?set BASE_BIN to a directory with the previous gust and libgust_preload.so}
base=${BENCH_DIR:-/dev/shm}/gust-listing.$$
mkdir -p "$base" bench/results
out=bench/results/listing-$(date +%Y%m%d-%H%M).json
declare -A bin=([new]="$GUST" [old]="$base_bin/gust")
cleanup() {
  for v in new old; do
    "${bin[$v]}" umount "$base/$v.mnt" >/dev/null 2>&1 || "${bin[$v]}" umount --lazy "$base/$v.mnt" >/dev/null 2>&1 || true
  done
  "$GUST" stop --rootdir "$base/new" >/dev/null 2>&1 || true
  "$base_bin/gust" stop --rootdir "$base/old" >/dev/null 2>&1 || true
  rm -rf "$base"
}
trap cleanup EXIT
for v in new old; do
  b=${bin[$v]}
  "$b" start --local 4 --rootdir "$base/$v" >/dev/null
  mkdir -p "$base/$v.mnt"
  GUST_HOSTS_FILE="$base/$v/gust.hosts" "$b" mount -d "$base/$v.mnt" --log "$base/$v.mount.log" >/dev/null
  # The same N empty files in both (through the preload library: one request each).
  GUST_HOSTS_FILE="$base/$v/gust.hosts" "$b" run -- python3 -c "
import os
os.mkdir('/gustfs/d')
for i in range($n):
    os.close(os.open(f'/gustfs/d/f{i:07d}', os.O_CREAT | os.O_WRONLY, 0o644))
"
done
: > "$out"
t() { local s e; s=$(date +%s%N); "$@" > /dev/null; e=$(date +%s%N); printf '%d.%09d' $(((e - s) / 1000000000)) $(((e - s) % 1000000000)); }
for r in $(seq 1 "$rounds"); do
  for v in new old; do
    b=${bin[$v]}
    pre=$(GUST_HOSTS_FILE="$base/$v/gust.hosts" t "$b" run -- ls -l /gustfs/d)
    fuse=$(t ls -l "$base/$v.mnt/d")
    lines=$(ls -l "$base/$v.mnt/d" | wc -l)
    printf '{"build": "%s", "round": %d, "entries": %d, "listed": %d, "preload_s": %s, "fuse_s": %s}\n' \
      "$v" "$r" "$n" "$((lines - 1))" "$pre" "$fuse" >> "$out"
  done
  echo "round $r done" >&2
done
python3 - "$out" <<'PY'
import json, sys, statistics as st
rows = [json.loads(l) for l in open(sys.argv[1])]
med = lambda v, k: st.median(r[k] for r in rows if r["build"] == v)
print("| front end | previous (s) | new (s) | previous/new (median of rounds) | per round |")
print("|---|---:|---:|---:|---|")
for k, name in [("preload_s", "LD_PRELOAD"), ("fuse_s", "FUSE")]:
    rounds = sorted(set(r["round"] for r in rows))
    per = [[r[k] for r in rows if r["round"] == i and r["build"] == "old"][0] /
           [r[k] for r in rows if r["round"] == i and r["build"] == "new"][0] for i in rounds]
    print(f"| {name} | {med('old', k):.2f} | {med('new', k):.2f} | {st.median(per):.1f} | {' '.join(f'{x:.1f}' for x in per)} |")
print(f"results: {sys.argv[1]}", file=sys.stderr)
PY
