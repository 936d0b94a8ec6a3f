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
cd "$(dirname "$0")/.."
. scripts/env.sh
rounds=${1:-5}
files=${2:-5000}
side=$HOME/.cache/gust-notrace
if [ -z "${NOTRACE_GUST:-}" ]; then
  cargo build --release --workspace --all-targets --features gust-trace/compile-out >/dev/null
  mkdir -p "$side"
  cp "$GUST" "$side/gust"
  NOTRACE_GUST=$side/gust
fi
cargo build --release --workspace --all-targets >/dev/null
root=${BENCH_DIR:-/dev/shm}/gust-trace-cost.$$
out=bench/results/trace-cost-$(date +%Y%m%d-%H%M).txt
raw=$(mktemp /tmp/gust-trace-cost.XXXXXX)
mkdir -p bench/results
hz=$(getconf CLK_TCK)
declare -A bin=([out]=$NOTRACE_GUST [off]=$GUST [on]=$GUST)
cleanup() {
  for v in out off on; do "${bin[$v]}" stop --rootdir "$root-$v" >/dev/null 2>&1 || true; done
  rm -rf "$root"-*
}
trap cleanup EXIT
cpu_of() { # total user+system ticks of the given pids
  local t=0
  for p in "$@"; do t=$((t + $(awk '{print $14 + $15}' "/proc/$p/stat"))); done
  echo "$t"
}
orders=("out off on" "off on out" "on out off")
for run in $(seq 1 "$rounds"); do
  for v in ${orders[$(((run - 1) % 3))]}; do
    g=${bin[$v]}
    startargs=()
    envs=()
    if [ "$v" = on ]; then
      startargs=(--trace all --trace-dir "$root-$v-trace")
      envs=(GUST_TRACE=all "GUST_TRACE_DIR=$root-$v-trace")
    fi
    "$g" start --local 4 --rootdir "$root-$v" "${startargs[@]}" >/dev/null
    pids=$(awk '$1 == "daemon" {print ($2 ~ /^[0-9]+$/ && $4 ~ /^[0-9]+$/) ? $4 : $6}' "$root-$v/gust.hosts")
    before=$(cpu_of $pids)
    c=$( { env "${envs[@]}" /usr/bin/time -f "%U %S" "$g" bench md -n "$files" -p 2 --rootdir "$root-$v" >/dev/null; } 2>&1 | tail -1)
    after=$(cpu_of $pids)
    "$g" stop --rootdir "$root-$v" >/dev/null 2>&1
    traced=0
    if [ -d "$root-$v-trace" ]; then traced=$(cat "$root-$v-trace"/*.gtrace | wc -c); fi
    rm -rf "$root-$v-trace"
    echo "$v $run $((files * 2 * 4)) $((after - before)) $c $traced" >>"$raw"
  done
done
python3 - "$raw" "$hz" "$rounds" "$files" <<'PY' | tee "$out"
import statistics, sys
raw, hz, rounds, files = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
rows = {}
for line in open(raw):
    v, run, units, dticks, cu, cs, traced = line.split()
    units = int(units)
    total = (int(dticks) / hz + float(cu) + float(cs)) / units * 1e6
    rows.setdefault(v, []).append((total, int(traced) / units))
print(f"# gust bench md -n {files} -p 2, 4 daemons on /dev/shm, {rounds} rounds in rotating order; CPU us per op (daemons + clients)")
print(f"{'variant':8} {'median':>8} {'min':>8} {'max':>8} {'vs out':>8} {'trace B/op':>10}")
base = statistics.median(t for t, _ in rows["out"])
for v in ("out", "off", "on"):
    ts = [t for t, _ in rows[v]]
    m = statistics.median(ts)
    print(f"{v:8} {m:8.2f} {min(ts):8.2f} {max(ts):8.2f} {m / base:8.3f} {statistics.median(b for _, b in rows[v]):10.1f}")
PY
echo "raw: $raw; results: $out"
