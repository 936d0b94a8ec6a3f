#!/usr/bin/env bash
# Size holds (docs/DESIGN.md, "Size holds"): what holding a writer's size under a
# grant costs against the build before (BASE_BIN: a directory with that build's
# `gust` and `libgust_preload.so`), through the preload library, 4 daemons, each
# run on a fresh instance, ABBA order, local file system in the same runs:
#   md4k:   `gust bench md -n 5000 -p 4 --no-excl --size 4096` (create, stat, read, remove)
#   io:     `gust bench io -p 2 -b 128MiB` (1 MiB transfers, a file per process)
#   shared: `gust bench io -p 4 -b 16MiB -t 8KiB --shared-file` (one file, 8 KiB writes)
# Usage: BASE_BIN=dir bench/run_size_holds.sh [rounds]   (JSON lines in
# bench/results/size-holds-<date>.json, a markdown table of medians on stdout).
set -euo pipefail
# shellcheck source=lib.sh
. "$(dirname "$0")/lib.sh"
cd "$BENCH_ROOT"
rounds=${1:-3}
base_bin=${BASE_BIN:?set BASE_BIN to a directory with the previous gust and libgust_preload.so}
base=${BENCH_DIR:-/dev/shm}/gust-holds.$$
bench_scratch "$base"
mkdir -p "$base/local"
out=$(bench_result size-holds)
: > "$out"
run() { # build workload
  local v=$1 w=$2 b root
  if [ "$v" = previous ]; then b=$base_bin/gust; root=$base/old; else b=$GUST; root=$base/new; fi
  bench_start "$b" 4 "$root"
  local json
  case $w in
    md4k) json=$(GUST_HOSTS_FILE="$root/gust.hosts" "$b" bench md -n 5000 -p 4 --no-excl --size 4096 \
            --target preload --baseline "$base/local" --json) ;;
    io) json=$(GUST_HOSTS_FILE="$root/gust.hosts" "$b" bench io -p 2 -b 128MiB --runs 1 \
          --target preload --baseline "$base/local" --json) ;;
    shared) json=$(GUST_HOSTS_FILE="$root/gust.hosts" "$b" bench io -p 4 -b 16MiB -t 8KiB --shared-file --runs 1 \
              --target preload --baseline "$base/local" --json) ;;
  esac
  bench_stop "$b" "$root"
  rm -rf "$root" "$base/local"/*
  bench_stats record "$out" build="$v" workload="$w" result:="$json"
}
for r in $(seq 1 "$rounds"); do
  for w in md4k io shared; do
    for v in $(bench_abba "$r" previous new); do run "$v" "$w"; done
  done
  echo "round $r done" >&2
done
bench_py - "$out" <<'PY'
import sys
from stats import local_rate, median, rate, read_jsonl
acc = {}
for r in read_jsonl(sys.argv[1]):
    for ph in r["result"]["phases"]:
        acc.setdefault((r["workload"], ph["phase"], r["build"]), []).append((rate(ph, "preload"), local_rate(ph)))
print("| workload | phase | previous | this | this/previous | this/local | previous/local |")
print("|---|---|---:|---:|---:|---:|---:|")
for (w, phase, b) in sorted(k for k in acc if k[2] == "new"):
    o, n = acc[(w, phase, "previous")], acc[(w, phase, "new")]
    mo, mn = median(x[0] for x in o), median(x[0] for x in n)
    print(f"| {w} | {phase} | {mo:,.0f} | {mn:,.0f} | {mn / mo:.2f} | {median(x[0] / x[1] for x in n):.3f} | "
          f"{median(x[0] / x[1] for x in o):.3f} |")
print(f"results: {sys.argv[1]}", file=sys.stderr)
PY
