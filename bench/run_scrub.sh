#!/usr/bin/env bash
# gust scrub beside a job (issue 33): the IOR-like benchmark (`gust bench io`, 4
# processes through the preload library) alone, and with `gust scrub` verifying a
# data set written before (SCRUB_GIB, default 2 GiB, in 64 MiB files) at its default
# rate in a loop, in alternating rounds on the same instance. Reports the median
# write and read rates of each and the slowdown (goal: at most 10%).
# Usage: bench/run_scrub.sh [rounds]   (env: SCRUB_RATE_MIB, default: gust scrub's
# default; SCRUB_GIB; BLOCK, default 256MiB per process; BENCH_DIR, default /dev/shm)
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/env.sh
rounds=${1:-5}
gib=${SCRUB_GIB:-2}
block=${BLOCK:-256MiB}
base=${BENCH_DIR:-/dev/shm}/gust-scrub.$$
mkdir -p "$base" bench/results
out=bench/results/scrub-$(date +%Y%m%d-%H%M).json
rate=()
[ -n "${SCRUB_RATE_MIB:-}" ] && rate=(--rate-mib "$SCRUB_RATE_MIB")
cleanup() {
  [ -n "${scrubber:-}" ] && kill "$scrubber" 2>/dev/null || true
  pkill -f "$GUST scrub" 2>/dev/null || true
  "$GUST" stop --rootdir "$base/root" >/dev/null 2>&1 || true
  rm -rf "$base"
}
trap cleanup EXIT
: > "$out"
"$GUST" start --local 4 --rootdir "$base/root" >/dev/null
export GUST_HOSTS_FILE=$base/root/gust.hosts GUST_MOUNTDIR=/gustfs
"$GUST" run -- sh -c "mkdir -p /gustfs/kept && for i in \$(seq 1 $((gib * 16))); do head -c 64M /dev/urandom > /gustfs/kept/f\$i; done"
io() { "$GUST" bench io -p 4 -b "$block" -t 1MiB --target preload --json; }
for r in $(seq 1 "$rounds"); do
  printf '{"round": %s, "scrub": false, "result": %s}\n' "$r" "$(io | tr -d '\n')" >> "$out"
  (while true; do "$GUST" scrub "${rate[@]}" >/dev/null 2>&1 || exit 1; done) &
  scrubber=$!
  sleep 1
  printf '{"round": %s, "scrub": true, "result": %s}\n' "$r" "$(io | tr -d '\n')" >> "$out"
  kill "$scrubber"; wait "$scrubber" 2>/dev/null || true; scrubber=
  pkill -f "$GUST scrub" 2>/dev/null || true # the pass under way
  echo "round $r done" >&2
done
python3 - "$out" <<'PY'
import json, sys, statistics
rates = {}
for line in open(sys.argv[1]):
    r = json.loads(line)
    for ph in r["result"]["phases"]:
        rates.setdefault((ph["phase"], r["scrub"]), []).append(ph["preload"]["median_rate"])
print("| phase | alone (MiB/s, median) | with gust scrub in a loop | slowdown |")
print("|---|---:|---:|---:|")
for phase in sorted({p for p, _ in rates}):
    a = statistics.median(rates[(phase, False)])
    f = statistics.median(rates[(phase, True)])
    print(f"| {phase} | {a:,.0f} | {f:,.0f} | {100 * (1 - f / a):.1f}% |")
PY
