#!/usr/bin/env bash
# A/B of two builds of `gust` through a FUSE mount (default options, 4 daemons on
# /dev/shm): `ls -l` of N files just created (cold: the first listing; warm: the
# second), 3 x 2,000 stats of listed files from Python, and `gust bench md -n 3000`
# through the mount. Rounds alternate which build goes first. For changes of the
# mount's caching (crates/fuse/src/coherence.rs): the old build is the previous
# commit's `gust`.
# Usage: bench/run_fuse_ab.sh OLD_GUST NEW_GUST [rounds]   (N: $BENCH_FILES, 10000)
set -euo pipefail
old=$1 new=$2 rounds=${3:-3}
n=${BENCH_FILES:-10000}
here=$(cd "$(dirname "$0")" && pwd)
for round in $(seq 1 "$rounds"); do
  if (( round % 2 )); then order="old new"; else order="new old"; fi
  for v in $order; do
    if [ "$v" = old ]; then g=$old; else g=$new; fi
    r=${BENCH_DIR:-/dev/shm}/gust-fuse-ab-$v.$$
    rm -rf "$r"; mkdir -p "$r/mnt"
    "$g" start --local 4 --rootdir "$r/fs" >/dev/null
    hosts=$r/fs/gust.hosts
    "$g" mount "$r/mnt" --hosts-file "$hosts" >/dev/null 2>&1 &
    for _ in $(seq 300); do mountpoint -q "$r/mnt" && break; sleep 0.05; done
    mkdir "$r/mnt/d"
    python3 -c "
import sys
for i in range(int(sys.argv[2])): open(f'{sys.argv[1]}/f{i}', 'w').close()" "$r/mnt/d" "$n"
    t0=$(date +%s.%N); ls -l "$r/mnt/d" >/dev/null; t1=$(date +%s.%N)
    ls -l "$r/mnt/d" >/dev/null; t2=$(date +%s.%N)
    stats=$(python3 -c "
import os, sys, time
d = sys.argv[1]
t = time.perf_counter()
for _ in range(3):
    for i in range(2000): os.stat(f'{d}/f{i}')
print(f'{6000 / (time.perf_counter() - t):.0f}')" "$r/mnt/d")
    md=$(GUST_HOSTS_FILE=$hosts "$g" bench md -n 3000 -p 1 --target "posix:$r/mnt" --json 2>/dev/null | python3 -c "
import json, sys
j = json.load(sys.stdin)
print(' '.join(f\"{p['phase']}={int([v for k, v in p.items() if k != 'phase'][0]['median_rate'])}\" for p in j['phases']))")
    printf '%s %s ls_l_cold_s=%.3f ls_l_warm_s=%.3f stats_per_s=%s %s\n' "$round" "$v" \
      "$(echo "$t1 - $t0" | bc)" "$(echo "$t2 - $t1" | bc)" "$stats" "$md"
    "$g" umount "$r/mnt" >/dev/null 2>&1 || "$g" umount --lazy "$r/mnt" >/dev/null 2>&1 || true
    "$g" stop --rootdir "$r/fs" >/dev/null 2>&1 || true
    rm -rf "$r"
  done
done
