#!/usr/bin/env bash
# Interference between GustFS and the application on one node (issue 34, "stay out
# of the job's way"), reported both ways: the speed of a fixed CPU-bound kernel
# (bench/interference.c, one thread per core, as an MPI job's ranks) beside a
# saturating GustFS load, and that load's rate beside the kernel, for each daemon
# setting; against the kernel alone, measured in the same run. Three loads, on a
# 1-daemon instance on /dev/shm:
#   stage: `gust stage out` of 64 files of 16 MiB, round after round: the daemon
#          copies, its client waits (a checkpoint staged out beside the job);
#   scrub: `gust scrub` of the same 1 GiB, unbounded rate: the daemon reads and
#          verifies, its client waits (a daemon busy for other nodes);
#   md:    `gust bench md` rounds (create, stat, read, remove 2,000 files of 4 KiB)
#          from one client process on the node: the client is busy as often as
#          the daemon, and competes with the kernel whatever the daemon's limits.
# Settings (rows): the defaults; --cpus 1; --cpus 1 with --nice 10 and 19; --nice 19;
# and for stage, --max-bandwidth 256MiB.
# The kernel's speed is given two ways: all threads together, and its slowest
# thread's times the threads (a bulk-synchronous job waits for its slowest rank).
# BIND=1 binds the kernel's thread i to core i, as an MPI launcher binds ranks:
# the case `--cpus` is for. LOADS picks loads (default: "stage scrub md").
# Usage: [BIND=1] [LOADS="..."] bench/run_interference.sh [runs] [seconds]
# Output: medians of `runs` (settings in rotated order); raw lines in $OUT.
set -euo pipefail
# shellcheck source=lib.sh
. "$(dirname "$0")/lib.sh"
cd "$BENCH_ROOT"
runs=${1:-5} secs=${2:-6} files=2000
out=${OUT:-$(mktemp /tmp/gust-interference.XXXXXX)}
base=${BENCH_DIR:-/dev/shm}/gust-interference.$$
root=$base/root
work=$(mktemp -d)
bench_scratch "$work" "$base"
# shellcheck disable=SC2016 # evaluated on exit
bench_on_exit 'touch "$work/stop"; [ -z "${loader:-}" ] || kill "$loader" 2>/dev/null'
mkdir -p "$base/src"
for i in $(seq 1 64); do head -c 16M /dev/urandom >"$base/src/f$i"; done
cc -O2 -pthread bench/interference.c -o "$work/kernel"
declare -A args=([default]="" [cpus1]="--cpus 1" [cpus1-nice10]="--cpus 1 --nice 10" [cpus1-nice19]="--cpus 1 --nice 19"
  [nice19]="--nice 19" [bw256]="--max-bandwidth 256MiB")
declare -A settings=([stage]="default cpus1 cpus1-nice10 cpus1-nice19 nice19 bw256"
  [scrub]="default cpus1 cpus1-nice10 cpus1-nice19 nice19" [md]="default cpus1 cpus1-nice10 cpus1-nice19 nice19")

load_round() { # one round of load $1; prints its units (MiB or operations)
  case $1 in
  stage)
    rm -rf "$base/out"
    "$GUST" stage out /gustfs/data "$base/out" --rootdir "$root" >/dev/null 2>&1
    echo 1024
    ;;
  scrub)
    "$GUST" scrub --rate-mib 1000000 --rootdir "$root" >/dev/null 2>&1
    echo 1024
    ;;
  md)
    "$GUST" bench md -n "$files" --size 4KiB -p 1 --rootdir "$root" >/dev/null
    echo $((files * 4))
    ;;
  esac
}

load_loop() { # rounds of load $1 until $work/stop exists; a line per round: units seconds
  : >"$work/rounds"
  while [ ! -e "$work/stop" ]; do
    local t0 u
    t0=$(bench_now)
    u=$(load_round "$1")
    echo "$u $(bench_elapsed "$t0")" >>"$work/rounds"
  done
}

for run in $(seq 1 "$runs"); do
  echo "alone - $run $("$work/kernel" "$secs") 0" >>"$out"
  for load in ${LOADS:-stage scrub md}; do
    read -ra list <<<"${settings[$load]}"
    for c in $(bench_rotate "$run" "${list[@]}"); do
      # shellcheck disable=SC2086 # the settings are words
      bench_start "$GUST" 1 "$root" ${args[$c]} 2>/dev/null
      if [ "$load" != md ]; then
        "$GUST" stage in "$base/src" /gustfs/data --rootdir "$root" >/dev/null 2>&1
      fi
      rm -f "$work/stop"
      load_loop "$load" &
      loader=$!
      # The load runs a round before the kernel starts.
      bench_wait 600 "a first round of $load" test -s "$work/rounds"
      kern=$("$work/kernel" "$secs")
      touch "$work/stop"
      wait "$loader"
      loader=
      rate=$(awk '{u += $1; t += $2} END {printf "%.1f", u / t}' "$work/rounds")
      bench_stop "$GUST" "$root"
      echo "$load $c $run $kern $rate" >>"$out"
    done
  done
done

bench_py - "$out" "${BIND:+bound}" <<'PY'
import sys
from stats import median
rows = {}
for line in open(sys.argv[1]):
    load, c, _, k, slow, rate = line.split()
    rows.setdefault((load, c), []).append((float(k), float(slow), float(rate)))
med = lambda v, i: median(x[i] for x in v)
alone = rows[("alone", "-")]
a_k, a_s = med(alone, 0), med(alone, 1)
bound = " (threads bound to cores)" if sys.argv[2] else ""
print(f"kernel alone{bound}: {a_k / 1e6:.3f} M iterations/s, slowest thread x threads "
      f"{a_s / 1e6:.3f} (medians of {len(alone)} runs)")
unit = {"stage": "MiB/s", "scrub": "MiB/s", "md": "ops/s"}
for load in ["stage", "scrub", "md"]:
    if (load, "default") not in rows:
        continue
    d_k, d_s = med(rows[(load, "default")], 0), med(rows[(load, "default")], 1)
    print(f"\nload {load}")
    print(f"{'daemon setting':<16} {'kernel':>7} {'/default':>9} {'slowest':>8} {'/default':>9} {'load (' + unit[load] + ')':>14}")
    for (l, c), v in rows.items():
        if l != load:
            continue
        k, sl, r = med(v, 0), med(v, 1), med(v, 2)
        print(f"{c:<16} {k / a_k:>7.2f} {k / d_k:>9.2f} {sl / a_s:>8.2f} {sl / d_s:>9.2f} {r:>14,.0f}")
PY
echo "raw: $out"
