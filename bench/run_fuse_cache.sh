#!/usr/bin/env bash
# Issue 29's FUSE goal: `ls -l`, stat and reads of small files in a tree the mount
# already looked at, against tmpfs, same run (bench/tree_again.py on each: 20
# directories x 100 files of 4 KiB, looked at once, then medians of 5 passes).
# A 4-daemon instance on /dev/shm, default mount options. Rounds alternate which
# side goes first. Prints one JSON line per side and round, then the ratios.
# Usage: bench/run_fuse_cache.sh [rounds]
set -euo pipefail
# shellcheck source=lib.sh
. "$(dirname "$0")/lib.sh"
cd "$BENCH_ROOT"
bench_build -p gust-cli
rounds=${1:-3}
base=${BENCH_DIR:-/dev/shm}/gust-fuse-cache.$$
bench_scratch "$base"
out=$(bench_result fuse-cache .jsonl)
: > "$out"
for round in $(seq 1 "$rounds"); do
  rm -rf "$base"; mkdir -p "$base/mnt" "$base/local"
  bench_start "$GUST" 4 "$base/fs"
  bench_mount "$GUST" "$base/mnt" --hosts-file "$base/fs/gust.hosts"
  for side in $(bench_abba "$round" local fuse); do
    if [ "$side" = local ]; then dir=$base/local/t; else dir=$base/mnt/t; fi
    bench_stats record "$out" round:="$round" side="$side" result:="$(python3 bench/tree_again.py "$dir")"
  done
  bench_umount "$GUST" "$base/mnt"
  bench_stop "$GUST" "$base/fs"
done
bench_py - "$out" <<'PY'
import sys
from stats import median, read_jsonl
rows = read_jsonl(sys.argv[1])
print(f"results: {sys.argv[1]}")
for what in ["ls_lR", "stat", "read"]:
    med = {s: median(r["result"][what]["per_s"] for r in rows if r["side"] == s) for s in ["local", "fuse"]}
    print(f"{what:6} local {med['local']:>12,.0f}/s  fuse {med['fuse']:>12,.0f}/s  fuse/local {med['fuse'] / med['local']:.2f}")
PY
