#!/usr/bin/env bash
# A/B of two builds of `gust` through a FUSE mount (default options, 4 daemons on
# /dev/shm): `ls -l` of N files just created (cold: the first listing; warm: the
# second), 3 x 2,000 stats of listed files from Python, and `gust bench md -n 3000`
# through the mount. Rounds alternate which build goes first. For changes of the
# mount's caching (crates/fuse/src/coherence.rs): the old build is the previous
# commit's `gust`.
# Usage: bench/run_fuse_ab.sh OLD_GUST NEW_GUST [rounds]   (N: $BENCH_FILES, 10000)
set -euo pipefail
# shellcheck source=lib.sh
. "$(dirname "$0")/lib.sh"
old=$1 new=$2 rounds=${3:-3}
n=${BENCH_FILES:-10000}
for round in $(seq 1 "$rounds"); do
  for v in $(bench_abba "$round" old new); do
    if [ "$v" = old ]; then g=$old; else g=$new; fi
    r=${BENCH_DIR:-/dev/shm}/gust-fuse-ab-$v.$$
    bench_scratch "$r"
    rm -rf "$r"; mkdir -p "$r/mnt"
    bench_start "$g" 4 "$r/fs"
    hosts=$r/fs/gust.hosts
    bench_mount "$g" "$r/mnt" --hosts-file "$hosts"
    mkdir "$r/mnt/d"
    python3 -c "
import sys
for i in range(int(sys.argv[2])): open(f'{sys.argv[1]}/f{i}', 'w').close()" "$r/mnt/d" "$n"
    t0=$(bench_now); ls -l "$r/mnt/d" >/dev/null; t1=$(bench_now)
    ls -l "$r/mnt/d" >/dev/null; t2=$(bench_now)
    stats=$(python3 -c "
import os, sys, time
d = sys.argv[1]
t = time.perf_counter()
for _ in range(3):
    for i in range(2000): os.stat(f'{d}/f{i}')
print(f'{6000 / (time.perf_counter() - t):.0f}')" "$r/mnt/d")
    md=$(GUST_HOSTS_FILE=$hosts "$g" bench md -n 3000 -p 1 --target "posix:$r/mnt" --json 2>/dev/null |
      bench_stats rates --format '{phase}={rate:.0f}')
    printf '%s %s ls_l_cold_s=%.3f ls_l_warm_s=%.3f stats_per_s=%s %s\n' "$round" "$v" \
      "$(bench_elapsed "$t0" "$t1")" "$(bench_elapsed "$t1" "$t2")" "$stats" "$md"
    bench_umount "$g" "$r/mnt"
    bench_stop "$g" "$r/fs"
    rm -rf "$r"
  done
done
