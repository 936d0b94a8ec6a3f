#!/usr/bin/env bash
# Erasure codes against copies: 4+2 (`gust start --ec 4+2`: 256 KiB chunks by
# default, whose 1 MiB stripes the 1 MiB writes cover whole) against R=1 and R=2,
# in the same run and build (4+2 also with 512 KiB chunks, the general default,
# whose 2 MiB stripes a 1 MiB write covers half of); R=1 twice, by default and with GUST_SHORT_CIRCUIT=0 (on
# one node every daemon is local, and R=1 reads and writes their files itself,
# which copies and codes do not: the second row is the network path, as it is for
# the data of other nodes on a cluster), each round a fresh 6-daemon instance on /dev/shm (512 KiB
# chunks), the three in rotated order. Per instance, through the preload library:
#   write:    P processes at once each copy its own S MiB file in with dd (1 MiB
#             blocks, bytes from a random file on /dev/shm), timed to the last one;
#   read:     the same files read back at once (dd to /dev/null);
#   capacity: the bytes the daemons' chunk files allocate (data and parity, not the
#             checksum sidecars), over the bytes written;
#   degraded (4+2 only): daemons 1 and 4 killed (kill -9), the files read again:
#             every stripe has two cells lost, and reads of them are rebuilt.
# Usage: bench/run_ec.sh [rounds] [MiB per process] [processes]
# Output: medians of the rounds, ratios to R=1 (and degraded/healthy reads);
# rounds in bench/results/ec-*.json.
set -euo pipefail
# shellcheck source=lib.sh
. "$(dirname "$0")/lib.sh"
rounds=${1:-3} mib=${2:-256} procs=${3:-2}
bench_build -p gust-cli -p gust-preload
out=$BENCH_ROOT/$(bench_result ec)
root=${BENCH_DIR:-/dev/shm}/gust-ec.$$
bench_scratch "$root"
mkdir -p "$root"
head -c "$((mib << 20))" /dev/urandom >"$root/src"

# chunk_bytes ROOTDIR: allocated bytes of the chunk files under it.
chunk_bytes() {
  find "$1" -path '*/chunks/*' -type f ! -name '*.sum' -printf '%b\n' | awk '{s += $1 * 512} END {print s + 0}'
}

# timed_dd HOSTS IF_FMT OF_FMT: P dd's at once through the preload library; seconds.
timed_dd() {
  local hosts=$1 inf=$2 outf=$3 t0 i pids=()
  t0=$(bench_now)
  for ((i = 0; i < procs; i++)); do
    # shellcheck disable=SC2059
    LD_PRELOAD=$BENCH_PRELOAD GUST_HOSTS_FILE=$hosts GUST_SHORT_CIRCUIT=$short \
      dd if="$(printf "$inf" "$i")" of="$(printf "$outf" "$i")" bs=1M status=none &
    pids+=($!)
  done
  for i in "${pids[@]}"; do wait "$i"; done
  bench_elapsed "$t0"
}

for run in $(seq 1 "$rounds"); do
  for way in $(bench_rotate "$run" r1 r1n r2 ec ec512); do
    short=1
    case $way in
      r1) args=(--replicas 1) ;;
      r1n) args=(--replicas 1) short=0 ;;
      r2) args=(--replicas 2) ;;
      ec) args=(--ec 4+2) ;;
      ec512) args=(--ec 4+2 --chunk-size 512KiB) ;;
    esac
    inst=$root/$way
    bench_start "$GUST" 6 "$inst" "${args[@]}"
    hosts=$inst/gust.hosts
    before=$(chunk_bytes "$inst")
    w=$(timed_dd "$hosts" "$root/src" /gustfs/f%d)
    used=$(($(chunk_bytes "$inst") - before))
    r=$(timed_dd "$hosts" /gustfs/f%d /dev/null)
    deg=null
    if [ "$way" = ec ] || [ "$way" = ec512 ]; then
      mapfile -t pids < <(bench_daemon_pids "$hosts")
      kill -9 "${pids[1]}" "${pids[4]}"
      deg=$(timed_dd "$hosts" /gustfs/f%d /dev/null)
    fi
    bench_stop "$GUST" "$inst" || true
    rm -rf "${inst:?}"
    echo "{\"way\": \"$way\", \"round\": $run, \"write_s\": $w, \"read_s\": $r, \"degraded_read_s\": $deg," \
      "\"chunk_bytes\": $used, \"bytes\": $((procs * (mib << 20)))}" >>"$out"
  done
done
bench_py - "$out" <<'PY'
import json, sys
from stats import median
rows = [json.loads(l) for l in open(sys.argv[1])]
def med(way, key, f=lambda r, v: v):
    return median([f(r, r[key]) for r in rows if r["way"] == way and r[key] is not None])
mibs = lambda r, s: r["bytes"] / 2**20 / s
n = len([r for r in rows if r["way"] == "r1"])
print(f"{'':<16} {'write MiB/s':>12} {'vs R=1':>7} {'vs R=1n':>8} {'read MiB/s':>11} {'vs R=1':>7} {'vs R=1n':>8}"
      f" {'space/data':>11}  (medians of {n}; R=1n: R=1 without short-circuit I/O)")
for way, name in [("r1", "R=1"), ("r1n", "R=1n"), ("r2", "R=2"), ("ec", "EC 4+2"), ("ec512", "EC 4+2, 512 KiB")]:
    w, r = med(way, "write_s", mibs), med(way, "read_s", mibs)
    w1, r1 = med("r1", "write_s", mibs), med("r1", "read_s", mibs)
    w1n, r1n = med("r1n", "write_s", mibs), med("r1n", "read_s", mibs)
    print(f"{name:<16} {w:>12.0f} {w / w1:>7.2f} {w / w1n:>8.2f} {r:>11.0f} {r / r1:>7.2f} {r / r1n:>8.2f}"
          f" {med(way, 'chunk_bytes', lambda r, v: v / r['bytes']):>11.3f}")
for way, name in [("ec", "EC 4+2"), ("ec512", "EC 4+2, 512 KiB chunks")]:
    d = med(way, "degraded_read_s", mibs)
    print(f"{name} reads with daemons 1 and 4 killed: {d:.0f} MiB/s, {d / med(way, 'read_s', mibs):.2f} of healthy reads")
print(f"rounds: {sys.argv[1]}")
PY
