#!/usr/bin/env bash
# Shared file (issue 14, size cache): 4 processes writing 8 KiB transfers to one shared
# file (each its own region), then reading them back, through the LD_PRELOAD library
# and the client core API, 4 daemons, for this build and a previous one (BASE_BIN: a
# directory with that build's `gust` and `libgust_preload.so`), each on its own
# instance, rounds alternating builds; local file system in the same runs. The new
# build runs twice a round: as it is, and with GUST_WRITE_BEHIND=1 (write-behind,
# opt-in: adjacent writes gathered into one chunk write), the variant "new+wb".
# Usage: BASE_BIN=dir bench/run_shared.sh [rounds]   (JSON lines in
# bench/results/shared-<date>.json, a markdown table of medians on stdout).
# Storage: BENCH_DIR (default /dev/shm). Bytes per process: BENCH_BLOCK (32MiB).
set -euo pipefail
# shellcheck source=lib.sh
. "$(dirname "$0")/lib.sh"
cd "$BENCH_ROOT"
rounds=${1:-3}
block=${BENCH_BLOCK:-32MiB}
base_bin=${BASE_BIN:?set BASE_BIN to a directory with the previous gust and libgust_preload.so}
base=${BENCH_DIR:-/dev/shm}/gust-shared.$$
bench_scratch "$base"
mkdir -p "$base/local"
out=$(bench_result shared)
: > "$out"
for r in $(seq 1 "$rounds"); do
  for v in previous new new+wb; do
    if [ $v = previous ]; then b=$base_bin/gust; root=$base/old; else b=$GUST; root=$base/new; fi
    wb=0; [ $v = new+wb ] && wb=1
    bench_start "$b" 4 "$root"
    json=$(GUST_WRITE_BEHIND=$wb GUST_HOSTS_FILE="$root/gust.hosts" "$b" bench io -b "$block" -t 8KiB --shared-file -p 4 --runs 1 \
      --target preload,gust --baseline "$base/local" --json)
    bench_stop "$b" "$root"
    bench_stats record "$out" build="$v" result:="$json"
  done
  echo "round $r done" >&2
done
bench_py - "$out" <<'PY'
import sys
from stats import local_rate, median, rate, read_jsonl
acc = {}
for r in read_jsonl(sys.argv[1]):
    for ph in r["result"]["phases"]:
        for t in ("preload", "gust"):
            acc.setdefault((t, ph["phase"], r["build"]), []).append((rate(ph, t), local_rate(ph)))
print("| front end | phase | build | previous MiB/s | this MiB/s | this/previous | this/local | previous/local | rounds (previous → this) |")
print("|---|---|---|---:|---:|---:|---:|---:|---|")
for t in ("preload", "gust"):
    for phase in ("write", "read"):
        for b in ("new", "new+wb"):
            o, n = acc[(t, phase, "previous")], acc.get((t, phase, b))
            if not n:
                continue
            mo, mn = median(x[0] for x in o), median(x[0] for x in n)
            per = ", ".join(f"{x[0]:.0f}→{y[0]:.0f}" for x, y in zip(o, n))
            print(f"| {t} | {phase} | {b} | {mo:.1f} | {mn:.1f} | {mn / mo:.2f} | {median(x[0] / x[1] for x in n):.3f} | {median(x[0] / x[1] for x in o):.3f} | {per} |")
print(f"results: {sys.argv[1]}", file=sys.stderr)
PY
