#!/usr/bin/env bash
# The daemons' CPU per `gust find` query, one build against another on the same kind
# of tree: for each build, 4 daemons on /dev/shm, a tree of FILES files in 1,000
# directories (bench/find_tree.c through that build's C API), then each query RUNS
# times; the 4 daemons' utime+stime from /proc around the runs, per query. CPU time
# is what a shared machine disturbs least (wall-clock medians are printed too).
# Usage: bench/run_find_cpu.sh OLD_BIN_DIR [files] [runs]
#   OLD_BIN_DIR holds the other build's `gust` and `libgust.so`.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/env.sh
cargo build --release --workspace >/dev/null
old=${1:?usage: bench/run_find_cpu.sh OLD_BIN_DIR [files] [runs]}
files=${2:-1000000}
runs=${3:-5}
out=bench/results/find-cpu-$(date +%Y%m%d-%H%M).txt
one() { # label gust libdir
  local label=$1 G=$2 lib=$3 base=${BENCH_DIR:-/dev/shm}/gust-find-cpu.$$
  mkdir -p "$base"
  trap '"$G" stop --rootdir "$base/fs" >/dev/null 2>&1 || true; rm -rf "$base"' RETURN
  "$G" start --local 4 --rootdir "$base/fs" >/dev/null 2>&1
  export GUST_HOSTS_FILE=$base/fs/gust.hosts
  cc -O2 -pthread -I crates/capi/include bench/find_tree.c -L "$lib" -Wl,-rpath,"$lib" -lgust -o "$base/find_tree"
  "$base/find_tree" "$GUST_HOSTS_FILE" /tree "$files" 4 1000 >/dev/null
  local pids
  pids=$(pgrep -f "daemon.*$base/fs" | tr '\n' ' ')
  dcpu() { local t=0 p; for p in $pids; do set -- $(cut -d' ' -f14,15 "/proc/$p/stat"); t=$((t + $1 + $2)); done; echo $t; }
  sleep 3
  local q
  for q in "-name f99999*" "-name *77" "-type d" "-name f1*" "-size +4k"; do
    local ts=() c0 c1 s e i
    c0=$(dcpu)
    for i in $(seq "$runs"); do
      s=$(date +%s%N); "$G" find /gustfs/tree $q | wc -l >/dev/null; e=$(date +%s%N)
      ts+=($(((e - s) / 1000000)))
    done
    c1=$(dcpu)
    printf '%-6s %-16s daemon CPU %5d ms/query   wall median %5d ms\n' "$label" "$q" $(((c1 - c0) * 1000 / $(getconf CLK_TCK) / runs)) \
      "$(printf '%s\n' "${ts[@]}" | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}')"
  done
}
{
  echo "# gust find, daemon CPU per query: $old against this build; $files files, $runs runs; $(uptime)"
  one old "$old/gust" "$old"
  one new "$GUST" "$CARGO_TARGET_DIR/release"
} | tee "$out"
echo "results: $out"
