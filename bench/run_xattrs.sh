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
# shellcheck source=lib.sh
. "$(dirname "$0")/lib.sh"
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
  for v in $(bench_abba "$round" old new); do
    if [ "$v" = old ]; then g=$old; else g=$new; fi
    r=${BENCH_DIR:-/dev/shm}/gust-xattrs-$v.$$
    bench_scratch "$r"
    rm -rf "$r"; mkdir -p "$r/mnt"
    bench_start "$g" 4 "$r/fs"
    hosts=$r/fs/gust.hosts
    bench_mount "$g" "$r/mnt" --hosts-file "$hosts"
    w=$(dd if=/dev/zero of="$r/mnt/w" bs=4k count=16384 2>&1 | awk '/copied/ {print $(NF-1)" "$NF}')
    case "$w" in *GB/s) w=$(echo "${w% *} * 1000" | bc) ;; *) w=${w% *} ;; esac
    GUST_HOSTS_FILE=$hosts "$g" run -- python3 -c "
import os
os.makedirs('/gustfs/l')
for i in range($n): open(f'/gustfs/l/f{i}', 'w').close()"
    ls_l=$(GUST_HOSTS_FILE=$hosts bench_time "$g" run -- ls -l /gustfs/l)
    line="$round $v fuse_write_MBps=$w ls_l_s=$(printf %.3f "$ls_l")"
    if [ "$v" = new ]; then
      line="$line gust: $(GUST_HOSTS_FILE=$hosts "$g" run -- python3 -c "$ops" /gustfs/x "$n")"
      line="$line tmpfs: $(python3 -c "$ops" "$r/local" "$n")"
    fi
    echo "$line"
    bench_umount "$g" "$r/mnt"
    bench_stop "$g" "$r/fs"
    rm -rf "$r"
  done
done
