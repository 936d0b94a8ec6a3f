#!/usr/bin/env bash
# gust find against GNU find, same run, same tree of N files (4 daemons, root
# directories on /dev/shm): GNU find through the FUSE mount, GNU find under the
# preload library (gust run), and gust find (the daemons scan their own records in
# parallel). GNU find runs through two mounts: the default one (listings carry
# attributes, READDIRPLUS) and one mounted `--readdirplus never` (names only), the
# faster of the two for walks that need no stat. Three queries: -name (GNU find needs no stat), -size +4k and
# -mmin -600 -type f (a stat per entry). Each timing is the median of RUNS runs; the
# match counts of the three tools must agree.
# Usage: bench/run_find.sh [files] [runs]  (results: bench/results/find-<date>-<files>.txt)
# QUERIES="-name f1*;-name f99999*" bench/run_find.sh ... runs other queries (';'-separated);
# TOOLS="gust preload" runs only those of gust (always include it), fuse, names (the
# names-only mount) and preload (the match counts of those run must agree; the
# others print as 0).
set -euo pipefail
# shellcheck source=lib.sh
. "$(dirname "$0")/lib.sh"
cd "$BENCH_ROOT"
bench_build --workspace
files=${1:-1000000}
runs=${2:-3}
base=${BENCH_DIR:-/dev/shm}/gust-find-bench.$$
bench_scratch "$base"
mnt=$base/mnt
names=$base/names
mkdir -p "$mnt" "$names"
out=$(bench_result find "-$files.txt")
bench_start "$GUST" 4 "$base/fs"
export GUST_HOSTS_FILE="$base/fs/gust.hosts"
lib=$CARGO_TARGET_DIR/release
cc -O2 -pthread -I crates/capi/include bench/find_tree.c -L "$lib" -Wl,-rpath,"$lib" -lgust -o "$base/find_tree"
t0=$(bench_now)
"$base/find_tree" "$GUST_HOSTS_FILE" /tree "$files" 4 1000
made=$(bench_elapsed "$t0")
bench_mount "$GUST" "$mnt"
bench_mount "$GUST" "$names" --readdirplus never
{
  echo "# gust find vs GNU find, $files files in $(( (files + 999) / 1000 )) directories, 4 daemons on /dev/shm, $(nproc) cores"
  echo "# tree made in $made s (C API, 4 threads); times are medians of $runs runs, seconds"
  echo "# $(uptime)"
  printf '%-28s %8s %8s %8s %8s %8s %10s %10s %10s\n' query matches gust fuse fuse-nm preload fuse/gust nm/gust pre/gust
} | tee "$out"
time_of() { # command... ; prints "seconds count"
  local s n
  s=$(bench_now)
  n=$("$@" | wc -l)
  echo "$(bench_elapsed "$s") $n"
}
IFS=';' read -r -a queries <<<"${QUERIES:--name f1*;-size +4k;-mmin -600 -type f}"
for q in "${queries[@]}"; do
  declare -A t=() n=()
  for tool in ${TOOLS:-gust fuse names preload}; do
    times=()
    for _ in $(seq "$runs"); do
      # shellcheck disable=SC2086 # the query is words
      case $tool in
        gust) r=$(time_of "$GUST" find /gustfs/tree $q) ;;
        fuse) r=$(time_of find "$mnt/tree" $q) ;;
        names) r=$(time_of find "$names/tree" $q) ;;
        preload) r=$(time_of "$GUST" run -- find /gustfs/tree $q) ;;
      esac
      times+=("${r% *}")
      n[$tool]=${r#* }
    done
    t[$tool]=$(bench_stats median "${times[@]}")
  done
  for tool in gust fuse names preload; do t[$tool]=${t[$tool]:-0}; n[$tool]=${n[$tool]:-${n[gust]}}; done
  if [ "${n[gust]}" != "${n[fuse]}" ] || [ "${n[gust]}" != "${n[names]}" ] || [ "${n[gust]}" != "${n[preload]}" ]; then
    echo "match counts differ for $q: gust ${n[gust]}, fuse ${n[fuse]}, fuse-nm ${n[names]}, preload ${n[preload]}" >&2
    exit 1
  fi
  printf '%-28s %8s %8.2f %8.2f %8.2f %8.2f %10.1f %10.1f %10.1f\n' "$q" "${n[gust]}" "${t[gust]}" "${t[fuse]}" "${t[names]}" "${t[preload]}" \
    "$(bench_div "${t[fuse]}" "${t[gust]}")" "$(bench_div "${t[names]}" "${t[gust]}")" "$(bench_div "${t[preload]}" "${t[gust]}")" | tee -a "$out"
  unset t n
done
echo "results: $out"
