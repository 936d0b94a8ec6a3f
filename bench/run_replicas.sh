#!/usr/bin/env bash
# The cost of replicas: R=2 against R=1 in the same run, same build. For each round,
# in ABBA order, a fresh 4-daemon instance on /dev/shm (`gust start --replicas R`)
# runs `gust bench md` (N files per process, 2 processes: create, stat, read,
# remove) and `gust bench io` (one file per process, written and read in 1 MiB
# transfers). Rates are wall-clock (the client waits for every copy, which CPU time
# would not show); the machine is shared, so the medians of the rounds are compared.
# Also the CPU time (user + system) of the daemons and the benchmark client per
# operation, which a busy machine disturbs less (as bench/run_cpu.sh).
# Usage: bench/run_replicas.sh GUST [rounds] [files] [block]
# Output: per phase, the median rate for R=1 and R=2 and R2/R1; raw JSON lines in
# $OUT (default a temp file).
set -euo pipefail
# shellcheck source=lib.sh
. "$(dirname "$0")/lib.sh"
g=$1 rounds=${2:-5} files=${3:-5000} block=${4:-256MiB}
out=${OUT:-$(mktemp /tmp/gust-replicas.XXXXXX)}
root=${BENCH_DIR:-/dev/shm}/gust-rep.$$
bench_scratch "$root"
for run in $(seq 1 "$rounds"); do
  for r in $(bench_abba "$run" 1 2); do
    for kind in md io; do
      bench_start "$g" 4 "$root/$r" --replicas "$r"
      mapfile -t pids < <(bench_daemon_pids "$root/$r/gust.hosts")
      before=$(bench_cpu_ticks "${pids[@]}")
      if [ "$kind" = md ]; then
        j=$( { /usr/bin/time -o "$root/$r.time" -f "%U %S" "$g" bench md -n "$files" -p 2 --rootdir "$root/$r" --json; } )
      else
        j=$( { /usr/bin/time -o "$root/$r.time" -f "%U %S" "$g" bench io -p 2 -b "$block" --rootdir "$root/$r" --json; } )
      fi
      after=$(bench_cpu_ticks "${pids[@]}")
      bench_stop "$g" "$root/$r"
      echo "$r $run $((after - before)) $(tr ' ' '+' <"$root/$r.time") $(echo "$j" | tr -d '\n ')" >>"$out"
      rm -rf "${root:?}/$r.time" "${root:?}/$r"
    done
  done
done
bench_py - "$out" "$BENCH_HZ" "$files" "$block" <<'PY'
import json, re, sys
from stats import median
hz, files = int(sys.argv[2]), int(sys.argv[3])
m = re.match(r"(\d+)([KMG]i?B?)?$", sys.argv[4], re.I)
mib = int(m.group(1)) * {"k": 1 / 1024, "m": 1, "g": 1024}.get((m.group(2) or "m")[0].lower(), 1)
rates, cpu = {}, {}
for line in open(sys.argv[1]):
    r, run, dticks, client, j = line.split(" ", 4)
    d = json.loads(j)
    kind = "md" if "Md" in d["workload"] else "io"
    for p in d["phases"]:
        rates.setdefault((kind, p["phase"], r), []).append(p["gust"]["median_rate"])
    # md: 4 phases of files x 2 processes; io: write and read of the block x 2.
    units = files * 2 * 4 if kind == "md" else mib * 2 * 2
    cs = int(dticks) / hz + sum(float(x) for x in client.split("+"))
    cpu.setdefault((kind, r), []).append(cs / units * 1e6)
print(f"{'phase':<12} {'R=1':>12} {'R=2':>12} {'R2/R1':>7}  (medians of {len(rates[('md','create','1')])} rounds)")
for kind, phase, unit in [("io", "write", "MiB/s"), ("io", "read", "MiB/s"), ("md", "create", "ops/s"),
                          ("md", "stat", "ops/s"), ("md", "read", "ops/s"), ("md", "remove", "ops/s")]:
    a = median(rates[(kind, phase, "1")])
    b = median(rates[(kind, phase, "2")])
    print(f"{kind + ' ' + phase:<12} {a:>12.0f} {b:>12.0f} {b / a:>7.2f}  {unit}")
for kind, unit in [("md", "op (all 4 phases)"), ("io", "MiB (write + read)")]:
    a, b = median(cpu[(kind, "1")]), median(cpu[(kind, "2")])
    print(f"{kind + ' cpu':<12} {a:>12.1f} {b:>12.1f} {b / a:>7.2f}  µs per {unit}, daemons + client")
print(f"raw: {sys.argv[1]}")
PY
