#!/usr/bin/env bash
# Issue 29's FUSE goal: `ls -l`, stat and reads of small files in a tree the mount
# already looked at, against tmpfs, same run (bench/tree_again.py on each: 20
# directories x 100 files of 4 KiB, looked at once, then medians of 5 passes).
# A 4-daemon instance on /dev/shm, default mount options. Rounds alternate which
# side goes first. Prints one JSON line per side and round, then the ratios.
# Usage: bench/run_fuse_cache.sh [rounds]
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/env.sh
cargo build --release -p gust-cli >/dev/null
rounds=${1:-3}
base=${BENCH_DIR:-/dev/shm}/gust-fuse-cache.$$
out=bench/results/fuse-cache-$(date +%Y%m%d-%H%M).jsonl
mkdir -p bench/results
cleanup() {
  "$GUST" umount "$base/mnt" >/dev/null 2>&1 || "$GUST" umount --lazy "$base/mnt" >/dev/null 2>&1 || true
  "$GUST" stop --rootdir "$base/fs" >/dev/null 2>&1 || true
  rm -rf "$base"
}
trap cleanup EXIT
: > "$out"
for round in $(seq 1 "$rounds"); do
  rm -rf "$base"; mkdir -p "$base/mnt" "$base/local"
  "$GUST" start --local 4 --rootdir "$base/fs" >/dev/null
  "$GUST" mount "$base/mnt" --hosts-file "$base/fs/gust.hosts" >/dev/null 2>&1 &
  for _ in $(seq 300); do mountpoint -q "$base/mnt" && break; sleep 0.05; done
  if (( round % 2 )); then order="local fuse"; else order="fuse local"; fi
  for side in $order; do
    if [ "$side" = local ]; then dir=$base/local/t; else dir=$base/mnt/t; fi
    printf '{"round": %d, "side": "%s", "result": %s}\n' "$round" "$side" "$(python3 bench/tree_again.py "$dir")" >> "$out"
  done
  "$GUST" umount "$base/mnt" >/dev/null 2>&1 || "$GUST" umount --lazy "$base/mnt" >/dev/null 2>&1 || true
  "$GUST" stop --rootdir "$base/fs" >/dev/null 2>&1
done
python3 - "$out" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
print(f"results: {sys.argv[1]}")
for what in ["ls_lR", "stat", "read"]:
    med = {s: statistics.median(r["result"][what]["per_s"] for r in rows if r["side"] == s) for s in ["local", "fuse"]}
    print(f"{what:6} local {med['local']:>12,.0f}/s  fuse {med['fuse']:>12,.0f}/s  fuse/local {med['fuse'] / med['local']:.2f}")
PY
