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
cd "$(dirname "$0")/.."
. scripts/env.sh
cargo build --release -p gust-cli >/dev/null
runs=${1:-3}
files=${BENCH_FILES:-5000}
block=${BENCH_BLOCK:-128MiB}
base=${BENCH_DIR:-/dev/shm}/gust-fuse-bench.$$
mnt=$base/mnt
mkdir -p "$base/local" "$mnt" bench/results
out=bench/results/fuse-$(date +%Y%m%d-%H%M).json
cleanup() {
  "$GUST" umount "$mnt" >/dev/null 2>&1 || "$GUST" umount --lazy "$mnt" >/dev/null 2>&1 || true
  "$GUST" stop --rootdir "$base/fs" >/dev/null 2>&1 || true
  rm -rf "$base"
}
trap cleanup EXIT
"$GUST" start --local 4 --rootdir "$base/fs" >/dev/null
export GUST_HOSTS_FILE="$base/fs/gust.hosts"
: > "$out"
record() { # config procs kind target json
  printf '{"config": "%s", "procs": %d, "kind": "%s", "target": "%s", "result": %s}\n' "$1" "$2" "$3" "$4" "$5" | tr -d '\n' >> "$out"
  echo >> "$out"
}
args_for() { # kind procs
  if [ "$1" = md ]; then echo "md -n $files -p $2"; else echo "io -b $block -t 1MiB -p $2"; fi
}
# API and local baseline (independent of mount options).
for p in 1 2 4; do
  for kind in md io; do
    record api "$p" "$kind" gust "$("$GUST" bench $(args_for $kind $p) --runs "$runs" --baseline "$base/local" --json)"
  done
done
configs=("default|" "timeouts-0|--attr-timeout 0 --entry-timeout 0" "timeouts-10|--attr-timeout 10 --entry-timeout 10" "writeback|--writeback-cache")
for c in "${configs[@]}"; do
  name=${c%%|*}
  opts=${c#*|}
  "$GUST" mount -d "$mnt" $opts --log "$base/mount-$name.log" >/dev/null 2>&1
  if [ "$name" = default ]; then procs="1 2 4"; else procs="1 4"; fi
  for p in $procs; do
    for kind in md io; do
      record "$name" "$p" "$kind" fuse "$("$GUST" bench $(args_for $kind $p) --runs "$runs" --target "posix:$mnt" --json)"
    done
  done
  "$GUST" umount "$mnt"
  for _ in $(seq 1 100); do grep -q " $mnt " /proc/mounts || break; sleep 0.05; done
done
python3 - "$out" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
def rates(r, target):
    return {ph["phase"]: ph[target]["median_rate"] for ph in r["result"]["phases"]}
api, local = {}, {}
for r in rows:
    if r["config"] == "api":
        api[(r["procs"], r["kind"])] = rates(r, "gust")
        t = [k for k in r["result"]["phases"][0] if k.startswith("posix:")][0]
        local[(r["procs"], r["kind"])] = rates(r, t)
print("| config | P | workload | phase | FUSE | API | local | FUSE/API | FUSE/local |")
print("|---|---|---|---|---:|---:|---:|---:|---:|")
for r in rows:
    if r["config"] == "api":
        continue
    key = (r["procs"], r["kind"])
    f = rates(r, [k for k in r["result"]["phases"][0] if k.startswith("posix:")][0])
    for ph, v in f.items():
        a, l = api[key][ph], local[key][ph]
        unit = "ops/s" if r["kind"] == "md" else "MiB/s"
        print(f"| {r['config']} | {r['procs']} | {r['kind']} | {ph} ({unit}) | {v:,.0f} | {a:,.0f} | {l:,.0f} | {v / a:.2f} | {v / l:.2f} |")
PY
echo "raw results: $out" >&2
