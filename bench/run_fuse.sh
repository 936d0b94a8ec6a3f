#!/usr/bin/env bash
# Benchmarks of the FUSE mount: the same `gust bench` workloads run through the mount
# (posix:<mountpoint>), through the client core API (gust) and on a local directory
# (baseline), with 4 daemons, in one run:
#   md: create/stat/read/remove of N 0-byte files per process, one dir per process
#   io: sequential 1 MiB writes then verified reads, file per process
# for P = 1, 2, 4 with the default mount options, then P = 1 and 4 for other cache
# settings (attr/entry timeouts 0 and 10 s, writeback cache). Medians of RUNS runs.
# Usage: bench/run_fuse.sh [runs]   (results: bench/results/fuse-<date>.json, table on stdout)
set -euo pipefail
# shellcheck source=lib.sh
. "$(dirname "$0")/lib.sh"
cd "$BENCH_ROOT"
bench_build -p gust-cli
runs=${1:-3}
files=${BENCH_FILES:-5000}
block=${BENCH_BLOCK:-128MiB}
base=${BENCH_DIR:-/dev/shm}/gust-fuse-bench.$$
bench_scratch "$base"
mnt=$base/mnt
mkdir -p "$base/local" "$mnt"
out=$(bench_result fuse)
bench_start "$GUST" 4 "$base/fs"
export GUST_HOSTS_FILE="$base/fs/gust.hosts"
: > "$out"
record() { # config procs kind target json
  bench_stats record "$out" config="$1" procs:="$2" kind="$3" target="$4" result:="$5"
}
args_for() { # kind procs
  if [ "$1" = md ]; then echo "md -n $files -p $2"; else echo "io -b $block -t 1MiB -p $2"; fi
}
# API and local baseline (independent of mount options).
for p in 1 2 4; do
  for kind in md io; do
    # shellcheck disable=SC2046 # the arguments are words
    record api "$p" "$kind" gust "$("$GUST" bench $(args_for "$kind" "$p") --runs "$runs" --baseline "$base/local" --json)"
  done
done
configs=("default|" "timeouts-0|--attr-timeout 0 --entry-timeout 0" "timeouts-10|--attr-timeout 10 --entry-timeout 10" "writeback|--writeback-cache")
for c in "${configs[@]}"; do
  name=${c%%|*}
  read -r -a opts <<<"${c#*|}"
  bench_mount "$GUST" "$mnt" "${opts[@]}" --log "$base/mount-$name.log"
  if [ "$name" = default ]; then procs="1 2 4"; else procs="1 4"; fi
  for p in $procs; do
    for kind in md io; do
      # shellcheck disable=SC2046 # the arguments are words
      record "$name" "$p" "$kind" fuse "$("$GUST" bench $(args_for "$kind" "$p") --runs "$runs" --target "posix:$mnt" --json)"
    done
  done
  bench_umount "$GUST" "$mnt"
done
bench_py - "$out" <<'PY'
import sys
from stats import local_rate, phase_rates, read_jsonl
rows = read_jsonl(sys.argv[1])
def posix(r):  # the posix: target: the mount, or the baseline of API rows
    return {ph["phase"]: local_rate(ph) for ph in r["result"]["phases"]}
api, loc = {}, {}
for r in rows:
    if r["config"] == "api":
        api[(r["procs"], r["kind"])] = phase_rates(r["result"], "gust")
        loc[(r["procs"], r["kind"])] = posix(r)
print("| config | P | workload | phase | FUSE | API | local | FUSE/API | FUSE/local |")
print("|---|---|---|---|---:|---:|---:|---:|---:|")
for r in rows:
    if r["config"] == "api":
        continue
    key = (r["procs"], r["kind"])
    for ph, v in posix(r).items():
        a, l = api[key][ph], loc[key][ph]
        unit = "ops/s" if r["kind"] == "md" else "MiB/s"
        print(f"| {r['config']} | {r['procs']} | {r['kind']} | {ph} ({unit}) | {v:,.0f} | {a:,.0f} | {l:,.0f} | {v / a:.2f} | {v / l:.2f} |")
PY
echo "raw results: $out" >&2
