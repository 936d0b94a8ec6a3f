#!/usr/bin/env bash
# Extended attributes and what answering them costs elsewhere (docs/PERFORMANCE.md,
# "Extended attributes"). Two builds of `gust` (OLD without extended attributes,
# NEW with them), 4 daemons on /dev/shm, rounds alternating which goes first:
#   fuse_write_MBps  dd of 4 KiB writes (64 MiB) through a FUSE mount: the kernel
#                    asks GETXATTR security.capability before each write unless the
#                    mount handles set-id bits itself (FUSE_HANDLE_KILLPRIV_V2)
#   ls_l_s           `ls -l` of N files under the preload library (ls asks two
#                    attributes of other namespaces per file)
# and, NEW only, against the same operations on a local tmpfs directory
# (/dev/shm) in the same round, from Python under the preload library:
#   set_per_s, first_get_per_s, get_per_s, list_per_s  os.setxattr, os.getxattr
#   (the first after this process's own set: a lookup; then again), os.listxattr
#   of N files
# Usage: bench/run_xattrs.sh OLD_GUST NEW_GUST [rounds]   (N: $BENCH_FILES, 2000)
set -euo pipefail
old=$1 new=$2 rounds=${3:-3}
n=${BENCH_FILES:-2000}
ops='
import os, sys, time
d, n = sys.argv[1], int(sys.argv[2])
os.makedirs(d, exist_ok=True)
for i in range(n): open(f"{d}/f{i}", "w").close()
def rate(f):
    t = time.perf_counter()
    for i in range(n): f(f"{d}/f{i}")
    return n / (time.perf_counter() - t)
s = rate(lambda p: os.setxattr(p, "user.tag", b"train-0042"))
g1 = rate(lambda p: os.getxattr(p, "user.tag"))
g = rate(lambda p: os.getxattr(p, "user.tag"))
l = rate(lambda p: os.listxattr(p))
print(f"set_per_s={s:.0f} first_get_per_s={g1:.0f} get_per_s={g:.0f} list_per_s={l:.0f}")'
for round in $(seq 1 "$rounds"); do
  if (( round % 2 )); then order="old new"; else order="new old"; fi
  for v in $order; do
    if [ "$v" = old ]; then g=$old; else g=$new; fi
    r=${BENCH_DIR:-/dev/shm}/gust-xattrs-$v.$$
    rm -rf "$r"; mkdir -p "$r/mnt"
    "$g" start --local 4 --rootdir "$r/fs" >/dev/null
    hosts=$r/fs/gust.hosts
    "$g" mount "$r/mnt" --hosts-file "$hosts" >/dev/null 2>&1 &
    for _ in $(seq 300); do mountpoint -q "$r/mnt" && break; sleep 0.05; done
    w=$(dd if=/dev/zero of="$r/mnt/w" bs=4k count=16384 2>&1 | awk '/copied/ {print $(NF-1)" "$NF}')
    case "$w" in *GB/s) w=$(echo "${w% *} * 1000" | bc) ;; *) w=${w% *} ;; esac
    GUST_HOSTS_FILE=$hosts "$g" run -- python3 -c "
import os
os.makedirs('/gustfs/l')
for i in range($n): open(f'/gustfs/l/f{i}', 'w').close()"
    t0=$(date +%s.%N)
    GUST_HOSTS_FILE=$hosts "$g" run -- ls -l /gustfs/l >/dev/null
    t1=$(date +%s.%N)
    line="$round $v fuse_write_MBps=$w ls_l_s=$(printf %.3f "$(echo "$t1 - $t0" | bc)")"
    if [ "$v" = new ]; then
      line="$line gust: $(GUST_HOSTS_FILE=$hosts "$g" run -- python3 -c "$ops" /gustfs/x "$n")"
      line="$line tmpfs: $(python3 -c "$ops" "$r/local" "$n")"
    fi
    echo "$line"
    "$g" umount "$r/mnt" >/dev/null 2>&1 || "$g" umount --lazy "$r/mnt" >/dev/null 2>&1 || true
    "$g" stop --rootdir "$r/fs" >/dev/null 2>&1 || true
    rm -rf "$r"
  done
done
