#!/usr/bin/env bash
# File locks (issue 30, part 4): what a lock+unlock pair (fcntl and flock) and a
# read-only open+close cost one process (bench/locks.py) on local tmpfs, under the
# LD_PRELOAD library, on a FUSE mount whose locks the daemons keep (the default) and
# on one that leaves them to the kernel (--local-locks: also FOPEN_NOFLUSH on
# read-only handles, so the open+close row shows what the FLUSH at each close
# costs). 2 daemons; the targets alternate, reversed every other round.
# Usage: bench/run_locks.sh [rounds] [pairs]   (GUST: the binary). Output: medians
# on stdout, raw JSON lines in bench/results/locks-<date>.json.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/env.sh
rounds=${1:-5} n=${2:-5000}
base=${BENCH_DIR:-/dev/shm}/gust-locks.$$
out=bench/results/locks-$(date +%Y%m%d-%H%M).json
mkdir -p "$base/local" "$base/daemons" "$base/local-locks" bench/results
cleanup() {
  "$GUST" umount "$base/daemons" >/dev/null 2>&1 || true
  "$GUST" umount "$base/local-locks" >/dev/null 2>&1 || true
  "$GUST" stop --rootdir "$base/fs" >/dev/null 2>&1 || true
  rm -rf "$base"
}
trap cleanup EXIT
"$GUST" start --local 2 --rootdir "$base/fs" --mountdir /gustfs >/dev/null
export GUST_HOSTS_FILE="$base/fs/gust.hosts"
"$GUST" mount -d "$base/daemons" --log "$base/m1.log" >/dev/null
"$GUST" mount -d "$base/local-locks" --local-locks --log "$base/m2.log" >/dev/null
lib=$(dirname "$GUST")/libgust_preload.so
run() {
  case $1 in
    local) python3 bench/locks.py "$base/local/f" "$n" ;;
    preload) LD_PRELOAD=$lib python3 bench/locks.py /gustfs/f "$n" ;;
    fuse) python3 bench/locks.py "$base/daemons/g" "$n" ;;
    fuse-local-locks) python3 bench/locks.py "$base/local-locks/h" "$n" ;;
  esac
}
targets="local preload fuse fuse-local-locks"
: >"$out"
for round in $(seq 1 "$rounds"); do
  order=$targets
  ((round % 2)) || order=$(echo "$targets" | tr ' ' '\n' | tac | tr '\n' ' ')
  for t in $order; do
    echo "{\"round\": $round, \"target\": \"$t\", \"result\": $(run "$t")}" >>"$out"
  done
done
python3 - "$out" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
print("| target | fcntl lock+unlock (µs) | flock lock+unlock (µs) | read-only open+close (µs) |")
print("|---|---:|---:|---:|")
for t in dict.fromkeys(r["target"] for r in rows):
    m = lambda k: statistics.median(r["result"][k] for r in rows if r["target"] == t)
    print(f"| {t} | {m('fcntl_us'):.1f} | {m('flock_us'):.1f} | {m('open_close_ro_us'):.1f} |")
PY
echo "raw: $out"
