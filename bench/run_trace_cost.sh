#!/usr/bin/env bash
# What tracepoints cost (issue 15, part 2): CPU time per metadata operation of
# three variants, in rotating order each round on a fresh 4-daemon instance on
# /dev/shm (`gust bench md -n FILES -p 2`: create, stat, read, remove):
#   out  a build with tracepoints compiled out (feature gust-trace/compile-out)
#   off  this build, tracepoints compiled in and off (the default)
#   on   this build with every tracepoint on: clients GUST_TRACE=all, daemons
#        `gust start --trace all --trace-dir` (trace files on /dev/shm)
# CPU = the daemons' user+system time (/proc/PID/stat) plus the benchmark's and
# its worker processes' (/usr/bin/time), divided by the operations; CPU time does
# not grow when a busy machine makes a process wait, so it is steadier than a rate.
# Goals: off/out within 2%, on/out within 15%.
# Usage: bench/run_trace_cost.sh [rounds] [files]
#   NOTRACE_GUST=path skips building the compiled-out variant (reuse a copy).
# Builds: the compiled-out variant in the same target directory (only gust-trace
# and the crates above it rebuild, not RocksDB), copied aside, then this build again.
set -euo pipefail
# shellcheck source=lib.sh
. "$(dirname "$0")/lib.sh"
cd "$BENCH_ROOT"
rounds=${1:-5}
files=${2:-5000}
side=$HOME/.cache/gust-notrace
if [ -z "${NOTRACE_GUST:-}" ]; then
  if [ "${GUST_BENCH_NO_BUILD:-}" = 1 ]; then
    echo "GUST_BENCH_NO_BUILD=1 builds no compiled-out variant: set NOTRACE_GUST" >&2
    exit 1
  fi
  bench_build --workspace --all-targets --features gust-trace/compile-out
  mkdir -p "$side"
  cp "$GUST" "$side/gust"
  NOTRACE_GUST=$side/gust
fi
bench_build --workspace --all-targets
root=${BENCH_DIR:-/dev/shm}/gust-trace-cost.$$
bench_scratch "$root"
out=$(bench_result trace-cost .txt)
raw=$(mktemp /tmp/gust-trace-cost.XXXXXX)
declare -A bin=([out]=$NOTRACE_GUST [off]=$GUST [on]=$GUST)
for run in $(seq 1 "$rounds"); do
  for v in $(bench_rotate $((run - 1)) out off on); do
    g=${bin[$v]}
    startargs=()
    envs=()
    if [ "$v" = on ]; then
      startargs=(--trace all --trace-dir "$root/$v-trace")
      envs=(GUST_TRACE=all "GUST_TRACE_DIR=$root/$v-trace")
    fi
    bench_start "$g" 4 "$root/$v" "${startargs[@]}"
    mapfile -t pids < <(bench_daemon_pids "$root/$v/gust.hosts")
    before=$(bench_cpu_ticks "${pids[@]}")
    c=$( { env "${envs[@]}" /usr/bin/time -f "%U %S" "$g" bench md -n "$files" -p 2 --rootdir "$root/$v" >/dev/null; } 2>&1 | tail -1)
    after=$(bench_cpu_ticks "${pids[@]}")
    bench_stop "$g" "$root/$v"
    traced=0
    if [ -d "$root/$v-trace" ]; then traced=$(cat "$root/$v-trace"/*.gtrace | wc -c); fi
    rm -rf "$root/$v-trace"
    echo "$v $run $((files * 2 * 4)) $((after - before)) $c $traced" >>"$raw"
  done
done
bench_py - "$raw" "$BENCH_HZ" "$rounds" "$files" <<'PY' | tee "$out"
import sys
from stats import median
raw, hz, rounds, files = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
rows = {}
for line in open(raw):
    v, run, units, dticks, cu, cs, traced = line.split()
    units = int(units)
    total = (int(dticks) / hz + float(cu) + float(cs)) / units * 1e6
    rows.setdefault(v, []).append((total, int(traced) / units))
print(f"# gust bench md -n {files} -p 2, 4 daemons on /dev/shm, {rounds} rounds in rotating order; CPU us per op (daemons + clients)")
print(f"{'variant':8} {'median':>8} {'min':>8} {'max':>8} {'vs out':>8} {'trace B/op':>10}")
base = median(t for t, _ in rows["out"])
for v in ("out", "off", "on"):
    ts = [t for t, _ in rows[v]]
    m = median(ts)
    print(f"{v:8} {m:8.2f} {min(ts):8.2f} {max(ts):8.2f} {m / base:8.3f} {median(b for _, b in rows[v]):10.1f}")
PY
echo "raw: $raw; results: $out"
