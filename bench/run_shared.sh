#!/usr/bin/env bash
# Shared file (issue 14, size cache): 4 processes writing 8 KiB transfers to one shared
# file (each its own region), then reading them back, through the LD_PRELOAD library
# and the client core API, 4 daemons, for this build and a previous one (BASE_BIN: a
# directory with that build's `gust` and `libgust_preload.so`), each on its own
# instance, rounds alternating builds; local file system in the same runs.
# Usage: BASE_BIN=dir bench/run_shared.sh [rounds]   (JSON lines in
# bench/results/shared-<date>.json, a markdown table of medians on stdout).
# Storage: BENCH_DIR (default /dev/shm). Bytes per process: BENCH_BLOCK (32MiB).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/env.sh
rounds=${1:-3}
block=${BENCH_BLOCK:-32MiB}
base_bin=${BASE_BIN:?set BASE_BIN to a directory with the previous gust and libgust_preload.so}
base=${BENCH_DIR:-/dev/shm}/gust-shared.$$
mkdir -p "$base/local" bench/results
out=bench/results/shared-$(date +%Y%m%d-%H%M).json
cleanup() {
  "$GUST" stop --rootdir "$base/new" >/dev/null 2>&1 || true
  "$base_bin/gust" stop --rootdir "$base/old" >/dev/null 2>&1 || true
  rm -rf "$base"
}
trap cleanup EXIT
: > "$out"
for r in $(seq 1 "$rounds"); do
  for v in previous new; do
    if [ $v = new ]; then b=$GUST; root=$base/new; else b=$base_bin/gust; root=$base/old; fi
    "$b" start --local 4 --rootdir "$root" >/dev/null
    json=$(GUST_HOSTS_FILE="$root/gust.hosts" "$b" bench io -b "$block" -t 8KiB --shared-file -p 4 --runs 1 \
      --target preload,gust --baseline "$base/local" --json)
    "$b" stop --rootdir "$root" >/dev/null
    printf '{"build": "%s", "result": %s}\n' "$v" "$(echo "$json" | tr -d '\n')" >> "$out"
  done
  echo "round $r done" >&2
done
python3 - "$out" <<'PY'
import json, sys, statistics as st
rows = [json.loads(l) for l in open(sys.argv[1])]
acc = {}
for r in rows:
    for ph in r["result"]["phases"]:
        loc = [v for k, v in ph.items() if k.startswith("posix:")][0]["median_rate"]
        for t in ("preload", "gust"):
            acc.setdefault((t, ph["phase"], r["build"]), []).append((ph[t]["median_rate"], loc))
print("| front end | phase | previous MiB/s | new MiB/s | new/previous | new/local | previous/local |")
print("|---|---|---:|---:|---:|---:|---:|")
for t in ("preload", "gust"):
    for phase in ("write", "read"):
        o, n = acc[(t, phase, "previous")], acc[(t, phase, "new")]
        mo, mn = st.median(x[0] for x in o), st.median(x[0] for x in n)
        print(f"| {t} | {phase} | {mo:.1f} | {mn:.1f} | {mn / mo:.2f} | {st.median(x[0] / x[1] for x in n):.3f} | {st.median(x[0] / x[1] for x in o):.3f} |")
print(f"results: {sys.argv[1]}", file=sys.stderr)
PY
