#!/usr/bin/env bash
# Small files (issue 14): `gust bench md` with 4 KiB files through the LD_PRELOAD
# library, 4 daemons, 4 processes, against the local file system in the same run, for
# this build and for a previous one (BASE_BIN: a directory holding that build's `gust`
# and `libgust_preload.so`; protocol versions differ, so each runs its own instance).
# Variants of this build: default (O_EXCL creates are not deferred), GUST_DEFER_EXCL=1,
# and --no-excl (mdtest's O_CREAT|O_WRONLY; the previous build with it too, so that
# inline files of both builds compare), each of the last two also with
# GUST_CREATE_BATCH=64 (batched creates, opt-in). Set VARIANTS=batch to run only
# previous, --no-excl and the two batched ones. Rounds alternate builds; each bench
# invocation measures GustFS and local back to back, so every ratio is same-run.
# Usage: BASE_BIN=dir bench/run_small.sh [rounds]   (JSON lines in
# bench/results/small-<date>.json, a markdown table of medians on stdout).
# Storage: BENCH_DIR (default /dev/shm). Files per process: BENCH_FILES (2000).
set -euo pipefail
# shellcheck source=lib.sh
. "$(dirname "$0")/lib.sh"
cd "$BENCH_ROOT"
rounds=${1:-3}
files=${BENCH_FILES:-2000}
size=${BENCH_SIZE:-4096}
base_bin=${BASE_BIN:?set BASE_BIN to a directory with the previous gust and libgust_preload.so}
base=${BENCH_DIR:-/dev/shm}/gust-small.$$
bench_scratch "$base"
mkdir -p "$base/local"
out=$(bench_result small)
: > "$out"
one() { # label, gust binary, rootdir, extra env..., -- bench args
  local label=$1 bin=$2 root=$3; shift 3
  local envs=()
  while [ "$1" != -- ]; do envs+=("$1"); shift; done
  shift
  bench_start "$bin" 4 "$root"
  json=$(env "${envs[@]}" GUST_HOSTS_FILE="$root/gust.hosts" "$bin" bench md -n "$files" --size "$size" -p 4 \
    --runs 1 --target preload --baseline "$base/local" --json "$@")
  bench_stop "$bin" "$root"
  bench_stats record "$out" variant="$label" result:="$json"
}
for r in $(seq 1 "$rounds"); do
  one "previous" "$base_bin/gust" "$base/old" X=1 --
  if [ "${VARIANTS:-all}" != batch ]; then
    one "new" "$GUST" "$base/new" X=1 --
    one "new, GUST_DEFER_EXCL=1" "$GUST" "$base/new" GUST_DEFER_EXCL=1 --
  fi
  one "new, --no-excl" "$GUST" "$base/new" X=1 -- --no-excl
  one "previous, --no-excl" "$base_bin/gust" "$base/old" X=1 -- --no-excl
  one "new, --no-excl, GUST_CREATE_BATCH=64" "$GUST" "$base/new" GUST_CREATE_BATCH=64 -- --no-excl
  one "new, GUST_DEFER_EXCL=1, GUST_CREATE_BATCH=64" "$GUST" "$base/new" GUST_DEFER_EXCL=1 GUST_CREATE_BATCH=64 --
  echo "round $r done" >&2
done
bench_py - "$out" <<'PY'
import sys
from stats import local_rate, median, rate, read_jsonl
rows = {}
for r in read_jsonl(sys.argv[1]):
    for ph in r["result"]["phases"]:
        g, l = rate(ph, "preload"), local_rate(ph)
        rows.setdefault((r["variant"], ph["phase"]), []).append((g, l, g / l))
print("| variant | phase | preload ops/s | local ops/s | preload/local (median of rounds) | per round |")
print("|---|---|---:|---:|---:|---|")
for (v, ph), xs in rows.items():
    print(f"| {v} | {ph} | {median(x[0] for x in xs):,.0f} | {median(x[1] for x in xs):,.0f} "
          f"| {median(x[2] for x in xs):.3f} | {' '.join(f'{x[2]:.3f}' for x in xs)} |")
print(f"results: {sys.argv[1]}", file=sys.stderr)
PY
