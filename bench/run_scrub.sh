#!/usr/bin/env bash
# gust scrub beside a job (issue 33): the IOR-like benchmark (`gust bench io`, 4
# processes through the preload library) alone, and with `gust scrub` verifying a
# data set written before (SCRUB_GIB, default 2 GiB, in 64 MiB files) at its default
# rate in a loop, in alternating rounds on the same instance. Reports the median
# write and read rates of each and the slowdown (goal: at most 10%).
# Usage: bench/run_scrub.sh [rounds]   (env: SCRUB_RATE_MIB, default: gust scrub's
# default; SCRUB_GIB; BLOCK, default 256MiB per process; BENCH_DIR, default /dev/shm)
set -euo pipefail
# shellcheck source=lib.sh
. "$(dirname "$0")/lib.sh"
cd "$BENCH_ROOT"
rounds=${1:-5}
gib=${SCRUB_GIB:-2}
block=${BLOCK:-256MiB}
base=${BENCH_DIR:-/dev/shm}/gust-scrub.$$
bench_scratch "$base"
mkdir -p "$base"
out=$(bench_result scrub)
rate=()
[ -n "${SCRUB_RATE_MIB:-}" ] && rate=(--rate-mib "$SCRUB_RATE_MIB")
# shellcheck disable=SC2016 # evaluated on exit
bench_on_exit '[ -n "${scrubber:-}" ] && kill "$scrubber" 2>/dev/null || true; pkill -f "$GUST scrub" 2>/dev/null || true'
: > "$out"
bench_start "$GUST" 4 "$base/root"
export GUST_HOSTS_FILE=$base/root/gust.hosts GUST_MOUNTDIR=/gustfs
"$GUST" run -- sh -c "mkdir -p /gustfs/kept && for i in \$(seq 1 $((gib * 16))); do head -c 64M /dev/urandom > /gustfs/kept/f\$i; done"
io() { "$GUST" bench io -p 4 -b "$block" -t 1MiB --target preload --json; }
for r in $(seq 1 "$rounds"); do
  bench_stats record "$out" round:="$r" scrub:=false result:="$(io)"
  (while true; do "$GUST" scrub "${rate[@]}" >/dev/null 2>&1 || exit 1; done) &
  scrubber=$!
  sleep 1
  bench_stats record "$out" round:="$r" scrub:=true result:="$(io)"
  kill "$scrubber"; wait "$scrubber" 2>/dev/null || true; scrubber=
  pkill -f "$GUST scrub" 2>/dev/null || true # the pass under way
  echo "round $r done" >&2
done
bench_py - "$out" <<'PY'
import sys
from stats import median, rate, read_jsonl
rates = {}
for r in read_jsonl(sys.argv[1]):
    for ph in r["result"]["phases"]:
        rates.setdefault((ph["phase"], r["scrub"]), []).append(rate(ph, "preload"))
print("| phase | alone (MiB/s, median) | with gust scrub in a loop | slowdown |")
print("|---|---:|---:|---:|")
for phase in sorted({p for p, _ in rates}):
    a = median(rates[(phase, False)])
    f = median(rates[(phase, True)])
    print(f"| {phase} | {a:,.0f} | {f:,.0f} | {100 * (1 - f / a):.1f}% |")
PY
