#!/usr/bin/env bash
# What the event log costs: the metadata benchmark (gust bench md, 4 daemons, root
# directories on /dev/shm) on two instances started side by side, one with event
# logs (the default, 16 MiB per daemon) and one without (--events-cap 0), run
# alternately ROUNDS times in ABBA order (on a shared machine whichever runs first
# in a round is favoured), so that both see the same load; per phase the median
# rate of each, their ratio, and the geometric mean of the per-round ratios. The
# stat and read phases record no events: their ratios show the noise. Sizes 0 (no close_write RPC) and 4 KiB (each
# file written, so each close sends close_write).
# Usage: [SIZES="0 4096"] bench/run_events_cost.sh [rounds] [files]  (results: bench/results/events-cost-<date>.txt)
set -euo pipefail
# shellcheck source=lib.sh
. "$(dirname "$0")/lib.sh"
cd "$BENCH_ROOT"
bench_build -p gust-cli
rounds=${1:-5}
files=${2:-5000}
base=${BENCH_DIR:-/dev/shm}/gust-events-bench.$$
bench_scratch "$base"
out=$(bench_result events-cost .txt)
mkdir -p "$base"
bench_start "$GUST" 4 "$base/on"
bench_start "$GUST" 4 "$base/off" --events-cap 0
rate() { # instance size -> "create stat read remove"
  "$GUST" bench md -n "$files" --size "$2" -p 2 --json --hosts-file "$base/$1/gust.hosts" | bench_stats rates --target gust
}
{
  echo "# gust bench md -n $files -p 2, 4 daemons per instance on /dev/shm, $(nproc) cores, $rounds alternating rounds"
  echo "# $(uptime)"
  printf '%-6s %-8s %12s %12s %8s %8s\n' size phase events-on events-off on/off paired
} | tee "$out"
for size in ${SIZES:-0 4096}; do
  : > "$base/on.txt"
  : > "$base/off.txt"
  for r in $(seq "$rounds"); do
    for v in $(bench_abba "$r" on off); do rate "$v" "$size" >> "$base/$v.txt"; done
  done
  i=1
  for phase in create stat read remove; do
    on=$(awk -v i=$i '{print $i}' "$base/on.txt" | bench_stats median)
    off=$(awk -v i=$i '{print $i}' "$base/off.txt" | bench_stats median)
    paired=$(paste "$base/on.txt" "$base/off.txt" | awk -v i=$i -v n=4 '{print $i, $(i + n)}' | bench_stats paired | cut -d' ' -f1)
    printf '%-6s %-8s %12.0f %12.0f %8.3f %8.3f\n' "$size" "$phase" "$on" "$off" "$(bench_div "$on" "$off")" "$paired" | tee -a "$out"
    i=$((i + 1))
  done
done
echo "results: $out"
