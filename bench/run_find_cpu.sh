#!/usr/bin/env bash
# The daemons' CPU per `gust find` query, one build against another on the same kind
# of tree: for each build, 4 daemons on /dev/shm, a tree of FILES files in 1,000
# directories (bench/find_tree.c through that build's C API), then each query RUNS
# times; the 4 daemons' utime+stime from /proc around the runs, per query. CPU time
# is what a shared machine disturbs least (wall-clock medians are printed too).
# Usage: bench/run_find_cpu.sh OLD_BIN_DIR [files] [runs]
#   OLD_BIN_DIR holds the other build's `gust` and `libgust.so`.
set -euo pipefail
# shellcheck source=lib.sh
. "$(dirname "$0")/lib.sh"
cd "$BENCH_ROOT"
bench_build --workspace
old=${1:?usage: bench/run_find_cpu.sh OLD_BIN_DIR [files] [runs]}
files=${2:-1000000}
runs=${3:-5}
out=$(bench_result find-cpu .txt)
base=${BENCH_DIR:-/dev/shm}/gust-find-cpu.$$
bench_scratch "$base"
one() { # label gust libdir
  local label=$1 G=$2 lib=$3
  mkdir -p "$base"
  bench_start "$G" 4 "$base/fs" 2>/dev/null
  export GUST_HOSTS_FILE=$base/fs/gust.hosts
  cc -O2 -pthread -I crates/capi/include bench/find_tree.c -L "$lib" -Wl,-rpath,"$lib" -lgust -o "$base/find_tree"
  "$base/find_tree" "$GUST_HOSTS_FILE" /tree "$files" 4 1000 >/dev/null
  local pids
  mapfile -t pids < <(bench_daemon_pids "$GUST_HOSTS_FILE")
  sleep 3
  local q
  for q in "-name f99999*" "-name *77" "-type d" "-name f1*" "-size +4k"; do
    local ts=() c0 c1 s e i
    c0=$(bench_cpu_ticks "${pids[@]}")
    for i in $(seq "$runs"); do
      s=$(bench_now)
      # shellcheck disable=SC2086 # the query is words
      "$G" find /gustfs/tree $q | wc -l >/dev/null
      e=$(bench_now)
      ts+=("$(((e - s) / 1000000))")
    done
    c1=$(bench_cpu_ticks "${pids[@]}")
    printf '%-6s %-16s daemon CPU %5d ms/query   wall median %5.0f ms\n' "$label" "$q" $(((c1 - c0) * 1000 / BENCH_HZ / runs)) \
      "$(bench_stats median "${ts[@]}")"
  done
  bench_stop "$G" "$base/fs"
  rm -rf "$base"
}
{
  bench_trap # a subshell: its own instances, its own trap
  echo "# gust find, daemon CPU per query: $old against this build; $files files, $runs runs; $(uptime)"
  one old "$old/gust" "$old"
  one new "$GUST" "$CARGO_TARGET_DIR/release"
} | tee "$out"
echo "results: $out"
