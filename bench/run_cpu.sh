#!/usr/bin/env bash
# CPU time per operation of two builds of `gust`, for "no performance change" claims
# on a machine too busy for wall-clock rates to mean much: CPU seconds do not grow
# when the scheduler makes a process wait. For each build, in ABBA order, a fresh
# 4-daemon instance on /dev/shm runs `gust bench md` (N files per process, 2
# processes: create, stat, read, remove) and `gust bench io` (one 256 MiB file per
# process, written and read in 1 MiB transfers); the daemons' CPU time (user +
# system, /proc/PID/stat, threads that exited included) and the benchmark client's
# are divided by the operations (md) or MiB (io) done.
# Usage: bench/run_cpu.sh OLD_GUST NEW_GUST [rounds] [files]
# Output: medians per build and their ratio; raw lines in $OUT (default a temp file).
set -euo pipefail
old=$1 new=$2 rounds=${3:-5} files=${4:-5000}
out=${OUT:-$(mktemp /tmp/gust-cpu.XXXXXX)}
root=${BENCH_DIR:-/dev/shm}/gust-cpu.$$
hz=$(getconf CLK_TCK)
declare -A bin=([old]=$old [new]=$new)
cpu_of() { # total user+system ticks of the given pids
  local t=0
  for p in "$@"; do
    t=$((t + $(awk '{print $14 + $15}' "/proc/$p/stat")))
  done
  echo "$t"
}
for run in $(seq 1 "$rounds"); do
  if (( run % 2 )); then order="old new"; else order="new old"; fi
  for v in $order; do
    g=${bin[$v]}
    for kind in md io; do
      "$g" start --local 4 --rootdir "$root-$v" >/dev/null
      pids=$(awk '$1 == "daemon" {print ($2 ~ /^[0-9]+$/ && $4 ~ /^[0-9]+$/) ? $4 : $6}' "$root-$v/gust.hosts")
      before=$(cpu_of $pids)
      if [ "$kind" = md ]; then
        c=$( { /usr/bin/time -f "%U %S" "$g" bench md -n "$files" -p 2 --rootdir "$root-$v" >/dev/null; } 2>&1 | tail -1)
        units=$((files * 2 * 4))
      else
        c=$( { /usr/bin/time -f "%U %S" "$g" bench io -p 2 -b 256MiB --rootdir "$root-$v" >/dev/null; } 2>&1 | tail -1)
        units=$((256 * 2 * 2))
      fi
      after=$(cpu_of $pids)
      "$g" stop --rootdir "$root-$v" >/dev/null 2>&1
      echo "$kind $v $run $units $((after - before)) $c" >>"$out"
    done
  done
done
python3 - "$out" "$hz" <<'PY'
import statistics, sys
hz = int(sys.argv[2])
rows = {}
for line in open(sys.argv[1]):
    kind, v, run, units, dticks, cu, cs = line.split()
    units = int(units)
    d = int(dticks) / hz / units * 1e6
    c = (float(cu) + float(cs)) / units * 1e6
    rows.setdefault((kind, v), []).append((d, c))
unit = {"md": "op", "io": "MiB"}
for kind in ("md", "io"):
    o, n = rows.get((kind, "old"), []), rows.get((kind, "new"), [])
    if not o or not n:
        continue
    med = lambda xs, i: statistics.median(x[i] for x in xs)
    print(f"{kind}: CPU µs per {unit[kind]}, median of {len(o)}: daemons old {med(o,0):.1f} new {med(n,0):.1f} "
          f"(new/old {med(n,0)/med(o,0):.2f}); client old {med(o,1):.1f} new {med(n,1):.1f} "
          f"(new/old {med(n,1)/med(o,1):.2f})")
print(f"raw: {sys.argv[1]}")
PY
