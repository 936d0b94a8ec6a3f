#!/usr/bin/env bash
# One run, every way in: the client core API (`gust`), the LD_PRELOAD library
# (`preload`), the FUSE mount (`posix:<mountpoint>`) and the local file system
# (baseline), on the same 4-daemon instance, interleaved run by run.
#   md: create/stat/read/remove of N 0-byte files per process, one dir per process
#   io: sequential 1 MiB writes then verified reads, file per process
# Usage: bench/run_frontends.sh [runs]   (JSON lines in bench/results/frontends-<date>.json,
# a markdown table on stdout). Storage: BENCH_DIR (default /dev/shm).
set -euo pipefail
# shellcheck source=lib.sh
. "$(dirname "$0")/lib.sh"
cd "$BENCH_ROOT"
bench_build -p gust-cli -p gust-preload
runs=${1:-3}
files=${BENCH_FILES:-10000}
block=${BENCH_BLOCK:-256MiB}
procs=${BENCH_PROCS:-1 2 4}
base=${BENCH_DIR:-/dev/shm}/gust-frontends.$$
bench_scratch "$base"
mnt=$base/mnt
mkdir -p "$base/local" "$mnt"
out=$(bench_result frontends)
bench_start "$GUST" 4 "$base/fs"
export GUST_HOSTS_FILE="$base/fs/gust.hosts"
bench_mount "$GUST" "$mnt" --log "$base/mount.log"
: > "$out"
for p in $procs; do
  for kind in md io; do
    if [ "$kind" = md ]; then args=(md -n "$files" -p "$p"); else args=(io -b "$block" -t 1MiB -p "$p"); fi
    json=$("$GUST" bench "${args[@]}" --runs "$runs" --target "gust,preload,posix:$mnt" --baseline "$base/local" --json)
    bench_stats record "$out" procs:="$p" kind="$kind" result:="$json"
  done
done
bench_py - "$out" "$mnt" "$base/local" <<'PY'
import sys
from stats import local_rate, rate, read_jsonl
path, mnt, local = sys.argv[1], sys.argv[2], sys.argv[3]
print("| P | phase | API | preload | FUSE | local | preload/API | FUSE/preload | FUSE/API | API/local | preload/local |")
print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
for r in read_jsonl(path):
    for ph in r["result"]["phases"]:
        g, pl, f, l = rate(ph, "gust"), rate(ph, "preload"), local_rate(ph, mnt), local_rate(ph, local)
        unit = "ops/s" if r["kind"] == "md" else "MiB/s"
        print(f"| {r['procs']} | {r['kind']} {ph['phase']} ({unit}) | {g:,.0f} | {pl:,.0f} | {f:,.0f} | {l:,.0f} | {pl/g:.2f} | {f/pl:.2f} | {f/g:.2f} | {g/l:.2f} | {pl/l:.2f} |")
print(f"results: {path}", file=sys.stderr)
PY
