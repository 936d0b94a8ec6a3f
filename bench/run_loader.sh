#!/usr/bin/env bash
# The data-loader workload (bench/loader.py): N files of log-normal sizes around
# 100 KiB, read whole in a fresh random order by W forked worker processes for E
# epochs, five ways in the same run, interleaved run by run:
#   module   gustfs.open (the Python module over the client core)
#   module-batch  gustfs.read_many per batch of BENCH_BATCH files (32), as a
#            loader's __getitems__ fetches a batch
#   module-16k  the same, on a copy made with GUST_INLINE_BYTES_MAX=16384: files
#            over 16 KiB in chunks, as before the inline bound was raised to 256 KiB
#   preload  Python's own open under `gust run` (the LD_PRELOAD library)
#   local    Python's own open on the local copy (the baseline)
# GustFS root directories and the local copy live on the same storage (BENCH_DIR,
# default /dev/shm: node-local memory, as on a diskless compute node).
# Usage: bench/run_loader.sh [runs]   (JSON lines in bench/results/loader-<date>.json,
# a markdown table on stdout). BENCH_FILES (20000), BENCH_WORKERS (4),
# BENCH_EPOCHS (2), BENCH_DAEMONS (4), BENCH_BATCH (32).
set -euo pipefail
# shellcheck source=lib.sh
. "$(dirname "$0")/lib.sh"
cd "$BENCH_ROOT"
bench_build --workspace --all-targets
bench_python_env
runs=${1:-3}
files=${BENCH_FILES:-20000}
workers=${BENCH_WORKERS:-4}
epochs=${BENCH_EPOCHS:-2}
daemons=${BENCH_DAEMONS:-4}
batch=${BENCH_BATCH:-32}
base=${BENCH_DIR:-/dev/shm}/gust-loader.$$
bench_scratch "$base"
mkdir -p "$base/local"
out=$(bench_result loader "-d$daemons.json")
bench_start "$GUST" "$daemons" "$base/fs"
eval "$("$GUST" env --rootdir "$base/fs")"  # GUST_HOSTS_FILE, GUST_MOUNTDIR
"$GUST_PYTHON" bench/loader.py make --files "$files" --local "$base/local" --gust /loader
GUST_INLINE_BYTES_MAX=16384 "$GUST_PYTHON" bench/loader.py make --files "$files" --local "$base/local" --gust /loader-16k --gust-only
read_args=(--manifest-dir "$base/local" --workers "$workers" --epochs "$epochs")
: > "$out"
for r in $(seq "$runs"); do
  # Rotate the order of the ways so that none always runs first or last.
  for t in $(bench_rotate "$r" module module-batch module-16k preload local); do
    case $t in
      module) json=$("$GUST_PYTHON" bench/loader.py read --target gust:/loader "${read_args[@]}") ;;
      module-batch) json=$("$GUST_PYTHON" bench/loader.py read --target gust:/loader --api read_many --batch "$batch" "${read_args[@]}") ;;
      module-16k) json=$("$GUST_PYTHON" bench/loader.py read --target gust:/loader-16k "${read_args[@]}") ;;
      preload) json=$("$GUST" run -- "$GUST_PYTHON" bench/loader.py read --target "posix:$GUST_MOUNTDIR/loader" "${read_args[@]}") ;;
      local) json=$("$GUST_PYTHON" bench/loader.py read --target "posix:$base/local" "${read_args[@]}") ;;
    esac
    bench_stats record "$out" run:="$r" way="$t" daemons:="$daemons" files:="$files" result:="$json"
  done
done
bench_py - "$out" <<'PY'
import sys
from stats import median, read_jsonl
rows = read_jsonl(sys.argv[1])
by = {}
for r in rows:
    by.setdefault(r["run"], {})[r["way"]] = r["result"]
def med(way, key):
    return median(by[run][way][key] for run in by)
def vs(a, b):  # median over runs of the same-run ratio
    return median(by[run][a]["files_per_s"] / by[run][b]["files_per_s"] for run in by)
r0 = rows[0]
print(f"{r0['files']} files, {r0['result']['workers']} workers, {len(r0['result']['epochs'])} epochs, "
      f"{r0['daemons']} daemons, medians of {len(by)} runs")
print("| way | files/s | MiB/s | /local (same run) |")
print("|---|---:|---:|---:|")
for way in ("module", "module-batch", "module-16k", "preload", "local"):
    print(f"| {way} | {med(way, 'files_per_s'):,.0f} | {med(way, 'mib_per_s'):,.0f} | {vs(way, 'local'):.2f} |")
print(f"module / module-16k (same run): {vs('module', 'module-16k'):.2f}")
print(f"results: {sys.argv[1]}", file=sys.stderr)
PY
