#!/usr/bin/env bash
# gust find against GNU find, same run, same tree of N files (4 daemons, root
# directories on /dev/shm): GNU find through the FUSE mount, GNU find under the
# preload library (gust run), and gust find (the daemons scan their own records in
# parallel). Three queries: -name (GNU find needs no stat), -size +4k and
# -mmin -600 -type f (a stat per entry). Each timing is the median of RUNS runs; the
# match counts of the three tools must agree.
# Usage: bench/run_find.sh [files] [runs]  (results: bench/results/find-<date>-<files>.txt)
# QUERIES="-name f1*;-name f99999*" bench/run_find.sh ... runs other queries (';'-separated).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/env.sh
cargo build --release -p gust-cli -p gust-capi -p gust-preload >/dev/null
files=${1:-1000000}
runs=${2:-3}
base=${BENCH_DIR:-/dev/shm}/gust-find-bench.$$
mnt=$base/mnt
mkdir -p "$mnt" bench/results
out=bench/results/find-$(date +%Y%m%d-%H%M)-$files.txt
cleanup() {
  "$GUST" umount "$mnt" >/dev/null 2>&1 || "$GUST" umount --lazy "$mnt" >/dev/null 2>&1 || true
  "$GUST" stop --rootdir "$base/fs" >/dev/null 2>&1 || true
  rm -rf "$base"
}
trap cleanup EXIT
"$GUST" start --local 4 --rootdir "$base/fs" >/dev/null
export GUST_HOSTS_FILE="$base/fs/gust.hosts"
lib=$CARGO_TARGET_DIR/release
cc -O2 -pthread -I crates/capi/include bench/find_tree.c -L "$lib" -Wl,-rpath,"$lib" -lgust -o "$base/find_tree"
t0=$(date +%s.%N)
"$base/find_tree" "$GUST_HOSTS_FILE" /tree "$files" 4 1000
t1=$(date +%s.%N)
"$GUST" mount "$mnt" -d >/dev/null
{
  echo "# gust find vs GNU find, $files files in $(( (files + 999) / 1000 )) directories, 4 daemons on /dev/shm, $(nproc) cores"
  echo "# tree made in $(echo "$t1 - $t0" | bc) s (C API, 4 threads); times are medians of $runs runs, seconds"
  echo "# $(uptime)"
  printf '%-28s %8s %10s %10s %10s %12s %12s\n' query matches gust fuse preload fuse/gust preload/gust
} | tee "$out"
median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
time_of() { # command... ; prints "seconds count"
  local s e n
  s=$(date +%s.%N)
  n=$("$@" | wc -l)
  e=$(date +%s.%N)
  echo "$(echo "$e - $s" | bc) $n"
}
IFS=';' read -r -a queries <<<"${QUERIES:--name f1*;-size +4k;-mmin -600 -type f}"
for q in "${queries[@]}"; do
  declare -A t=() n=()
  for tool in gust fuse preload; do
    times=()
    for _ in $(seq "$runs"); do
      case $tool in
        gust) r=$(time_of "$GUST" find /gustfs/tree $q) ;;
        fuse) r=$(time_of find "$mnt/tree" $q) ;;
        preload) r=$(time_of "$GUST" run -- find /gustfs/tree $q) ;;
      esac
      times+=("${r% *}")
      n[$tool]=${r#* }
    done
    t[$tool]=$(printf '%s\n' "${times[@]}" | median)
  done
  if [ "${n[gust]}" != "${n[fuse]}" ] || [ "${n[gust]}" != "${n[preload]}" ]; then
    echo "match counts differ for $q: gust ${n[gust]}, fuse ${n[fuse]}, preload ${n[preload]}" >&2
    exit 1
  fi
  printf '%-28s %8s %10.2f %10.2f %10.2f %12.1f %12.1f\n' "$q" "${n[gust]}" "${t[gust]}" "${t[fuse]}" "${t[preload]}" \
    "$(echo "${t[fuse]} / ${t[gust]}" | bc -l)" "$(echo "${t[preload]} / ${t[gust]}" | bc -l)" | tee -a "$out"
  unset t n
done
echo "results: $out"
