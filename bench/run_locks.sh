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
# shellcheck source=lib.sh
. "$(dirname "$0")/lib.sh"
cd "$BENCH_ROOT"
rounds=${1:-5} n=${2:-5000}
base=${BENCH_DIR:-/dev/shm}/gust-locks.$$
bench_scratch "$base"
out=$(bench_result locks)
mkdir -p "$base/local" "$base/daemons" "$base/local-locks"
bench_start "$GUST" 2 "$base/fs" --mountdir /gustfs
export GUST_HOSTS_FILE="$base/fs/gust.hosts"
bench_mount "$GUST" "$base/daemons" --log "$base/m1.log"
bench_mount "$GUST" "$base/local-locks" --local-locks --log "$base/m2.log"
run() {
  case $1 in
    local) python3 bench/locks.py "$base/local/f" "$n" ;;
    preload) LD_PRELOAD=$BENCH_PRELOAD python3 bench/locks.py /gustfs/f "$n" ;;
    fuse) python3 bench/locks.py "$base/daemons/g" "$n" ;;
    fuse-local-locks) python3 bench/locks.py "$base/local-locks/h" "$n" ;;
  esac
}
: >"$out"
for round in $(seq 1 "$rounds"); do
  for t in $(bench_abba "$round" local preload fuse fuse-local-locks); do
    bench_stats record "$out" round:="$round" target="$t" result:="$(run "$t")"
  done
done
bench_py - "$out" <<'PY'
import sys
from stats import median, read_jsonl
rows = read_jsonl(sys.argv[1])
print("| target | fcntl lock+unlock (µs) | flock lock+unlock (µs) | read-only open+close (µs) |")
print("|---|---:|---:|---:|")
for t in dict.fromkeys(r["target"] for r in rows):
    m = lambda k: median(r["result"][k] for r in rows if r["target"] == t)
    print(f"| {t} | {m('fcntl_us'):.1f} | {m('flock_us'):.1f} | {m('open_close_ro_us'):.1f} |")
PY
echo "raw: $out"
