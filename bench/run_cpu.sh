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
# shellcheck source=lib.sh
. "$(dirname "$0")/lib.sh"
old=$1 new=$2 rounds=${3:-5} files=${4:-5000}
out=${OUT:-$(mktemp /tmp/gust-cpu.XXXXXX)}
root=${BENCH_DIR:-/dev/shm}/gust-cpu.$$
bench_scratch "$root"
declare -A bin=([old]=$old [new]=$new)
for run in $(seq 1 "$rounds"); do
  for v in $(bench_abba "$run" old new); do
    g=${bin[$v]}
    for kind in md io; do
      bench_start "$g" 4 "$root/$v"
      mapfile -t pids < <(bench_daemon_pids "$root/$v/gust.hosts")
      before=$(bench_cpu_ticks "${pids[@]}")
      if [ "$kind" = md ]; then
        c=$( { /usr/bin/time -f "%U %S" "$g" bench md -n "$files" -p 2 --rootdir "$root/$v" >/dev/null; } 2>&1 | tail -1)
        units=$((files * 2 * 4))
      else
        c=$( { /usr/bin/time -f "%U %S" "$g" bench io -p 2 -b 256MiB --rootdir "$root/$v" >/dev/null; } 2>&1 | tail -1)
        units=$((256 * 2 * 2))
      fi
      after=$(bench_cpu_ticks "${pids[@]}")
      bench_stop "$g" "$root/$v"
      echo "$kind $v $run $units $((after - before)) $c" >>"$out"
    done
  done
done
bench_py - "$out" "$BENCH_HZ" <<'PY'
import sys
from stats import median
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
    med = lambda xs, i: median(x[i] for x in xs)
    print(f"{kind}: CPU µs per {unit[kind]}, median of {len(o)}: daemons old {med(o,0):.1f} new {med(n,0):.1f} "
          f"(new/old {med(n,0)/med(o,0):.2f}); client old {med(o,1):.1f} new {med(n,1):.1f} "
          f"(new/old {med(n,1)/med(o,1):.2f})")
print(f"raw: {sys.argv[1]}")
PY
