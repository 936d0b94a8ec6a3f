#!/usr/bin/env bash
# Stage-out while the job runs (issue 10, part 2): the IOR-like benchmark (`gust bench
# io`, 4 processes through the preload library) alone, and with `gust stage out
# --follow / DEST --max-bandwidth BW` copying its files out as they are closed, in
# alternating rounds on the same instance. Reports the median write and read rates
# of each and the slowdown (goal: at most 10%).
# Usage: bench/run_stage_follow.sh [rounds]   (env: FOLLOW_BW, default 200M; BLOCK,
# default 256MiB per process; BENCH_DIR, default /dev/shm)
set -euo pipefail
# shellcheck source=lib.sh
. "$(dirname "$0")/lib.sh"
cd "$BENCH_ROOT"
rounds=${1:-5}
bw=${FOLLOW_BW:-200M}
block=${BLOCK:-256MiB}
base=${BENCH_DIR:-/dev/shm}/gust-follow.$$
bench_scratch "$base"
mkdir -p "$base"
out=$(bench_result stage-follow)
# shellcheck disable=SC2016 # evaluated on exit
bench_on_exit '[ -n "${follower:-}" ] && kill -INT "$follower" 2>/dev/null || true'
: > "$out"
bench_start "$GUST" 4 "$base/root"
export GUST_HOSTS_FILE=$base/root/gust.hosts GUST_MOUNTDIR=/gustfs
io() { "$GUST" bench io -p 4 -b "$block" -t 1MiB --target preload --json; }
for r in $(seq 1 "$rounds"); do
  bench_stats record "$out" round:="$r" follow:=false result:="$(io)"
  "$GUST" stage out / "$base/out" --follow --max-bandwidth "$bw" > /dev/null 2>"$base/follow.err" &
  follower=$!
  sleep 1
  bench_stats record "$out" round:="$r" follow:=true result:="$(io)"
  kill -INT "$follower"; wait "$follower" || true; follower=
  rm -rf "$base/out"
  echo "round $r done" >&2
done
bench_py - "$out" "$bw" <<'PY'
import sys
from stats import median, rate, read_jsonl
rates = {}
for r in read_jsonl(sys.argv[1]):
    for ph in r["result"]["phases"]:
        rates.setdefault((ph["phase"], r["follow"]), []).append(rate(ph, "preload"))
print(f"| phase | alone (MiB/s, median) | with --follow --max-bandwidth {sys.argv[2]} | slowdown |")
print("|---|---:|---:|---:|")
for phase in sorted({p for p, _ in rates}):
    a = median(rates[(phase, False)])
    f = median(rates[(phase, True)])
    print(f"| {phase} | {a:,.0f} | {f:,.0f} | {100 * (1 - f / a):.1f}% |")
PY
