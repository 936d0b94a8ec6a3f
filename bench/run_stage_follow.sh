#!/usr/bin/env bash
# Stage-out while the job runs (issue 10, part 2): the IOR-like benchmark (`gust bench
# io`, 4 processes through the preload library) alone, and with `gust stage out
# --follow / DEST --max-bandwidth BW` copying its files out as they are closed, in
# alternating rounds on the same instance. Reports the median write and read rates
# of each and the slowdown (goal: at most 10%).
# Usage: bench/run_stage_follow.sh [rounds]   (env: FOLLOW_BW, default 200M; BLOCK,
# default 256MiB per process; BENCH_DIR, default /dev/shm)
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/env.sh
rounds=${1:-5}
bw=${FOLLOW_BW:-200M}
block=${BLOCK:-256MiB}
base=${BENCH_DIR:-/dev/shm}/gust-follow.$$
mkdir -p "$base" bench/results
out=bench/results/stage-follow-$(date +%Y%m%d-%H%M).json
cleanup() {
  [ -n "${follower:-}" ] && kill -INT "$follower" 2>/dev/null || true
  "$GUST" stop --rootdir "$base/root" >/dev/null 2>&1 || true
  rm -rf "$base"
}
trap cleanup EXIT
: > "$out"
"$GUST" start --local 4 --rootdir "$base/root" >/dev/null
export GUST_HOSTS_FILE=$base/root/gust.hosts GUST_MOUNTDIR=/gustfs
io() { "$GUST" bench io -p 4 -b "$block" -t 1MiB --target preload --json; }
for r in $(seq 1 "$rounds"); do
  printf '{"round": %s, "follow": false, "result": %s}\n' "$r" "$(io | tr -d '\n')" >> "$out"
  "$GUST" stage out / "$base/out" --follow --max-bandwidth "$bw" > /dev/null 2>"$base/follow.err" &
  follower=$!
  sleep 1
  printf '{"round": %s, "follow": true, "result": %s}\n' "$r" "$(io | tr -d '\n')" >> "$out"
  kill -INT "$follower"; wait "$follower" || true; follower=
  rm -rf "$base/out"
  echo "round $r done" >&2
done
python3 - "$out" "$bw" <<'PY'
import json, sys, statistics
rates = {}
for line in open(sys.argv[1]):
    r = json.loads(line)
    for ph in r["result"]["phases"]:
        rates.setdefault((ph["phase"], r["follow"]), []).append(ph["preload"]["median_rate"])
print(f"| phase | alone (MiB/s, median) | with --follow --max-bandwidth {sys.argv[2]} | slowdown |")
print("|---|---:|---:|---:|")
for phase in sorted({p for p, _ in rates}):
    a = statistics.median(rates[(phase, False)])
    f = statistics.median(rates[(phase, True)])
    print(f"| {phase} | {a:,.0f} | {f:,.0f} | {100 * (1 - f / a):.1f}% |")
PY
