#!/usr/bin/env bash
# One run, every way in: the client core API (`gust`), the LD_PRELOAD library
# (`preload`), the FUSE mount (`posix:<mountpoint>`) and the local file system
# (baseline), on the same 4-daemon instance, interleaved run by run.
#   md: create/stat/read/remove of N 0-byte files per process, one dir per process
#   io: sequential 1 MiB writes then verified reads, file per process
# Usage: bench/run_frontends.sh [runs]   (JSON lines in bench/results/frontends-<date>.json,
# a markdown table on stdout). Storage: BENCH_DIR (default /dev/shm).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/env.sh
cargo build --release -p gust-cli -p gust-preload >/dev/null
runs=${1:-3}
files=${BENCH_FILES:-10000}
block=${BENCH_BLOCK:-256MiB}
procs=${BENCH_PROCS:-1 2 4}
base=${BENCH_DIR:-/dev/shm}/gust-frontends.$$
mnt=$base/mnt
mkdir -p "$base/local" "$mnt" bench/results
out=bench/results/frontends-$(date +%Y%m%d-%H%M).json
cleanup() {
  "$GUST" umount "$mnt" >/dev/null 2>&1 || "$GUST" umount --lazy "$mnt" >/dev/null 2>&1 || true
  "$GUST" stop --rootdir "$base/fs" >/dev/null 2>&1 || true
  rm -rf "$base"
}
trap cleanup EXIT
"$GUST" start --local 4 --rootdir "$base/fs" >/dev/null
export GUST_HOSTS_FILE="$base/fs/gust.hosts"
"$GUST" mount -d "$mnt" --log "$base/mount.log" >/dev/null
: > "$out"
for p in $procs; do
  for kind in md io; do
    if [ "$kind" = md ]; then args=(md -n "$files" -p "$p"); else args=(io -b "$block" -t 1MiB -p "$p"); fi
    json=$("$GUST" bench "${args[@]}" --runs "$runs" --target "gust,preload,posix:$mnt" --baseline "$base/local" --json)
    printf '{"procs": %d, "kind": "%s", "result": %s}\n' "$p" "$kind" "$(echo "$json" | tr -d '\n')" >> "$out"
  done
done
python3 - "$out" "$mnt" "$base/local" <<'PY'
import json, sys
path, mnt, local = sys.argv[1], sys.argv[2], sys.argv[3]
print("| P | phase | API | preload | FUSE | local | preload/API | FUSE/preload | FUSE/API | API/local | preload/local |")
print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
for line in open(path):
    r = json.loads(line)
    for ph in r["result"]["phases"]:
        g = ph["gust"]["median_rate"]; pl = ph["preload"]["median_rate"]
        f = ph["posix:" + mnt]["median_rate"]; l = ph["posix:" + local]["median_rate"]
        unit = "ops/s" if r["kind"] == "md" else "MiB/s"
        print(f"| {r['procs']} | {r['kind']} {ph['phase']} ({unit}) | {g:,.0f} | {pl:,.0f} | {f:,.0f} | {l:,.0f} | {pl/g:.2f} | {f/pl:.2f} | {f/g:.2f} | {g/l:.2f} | {pl/l:.2f} |")
print(f"results: {path}", file=sys.stderr)
PY
