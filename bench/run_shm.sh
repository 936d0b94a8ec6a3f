#!/usr/bin/env bash
# The node-local transport: shared-memory rings (GUST_TRANSPORT=shm) against the
# Unix socket (the default), same daemons, same run, alternating ABBA round by round.
# Each round and variant runs `gust bench md` (N 0-byte files per process, P
# processes, through the LD_PRELOAD library) twice on one 4-daemon instance:
#   rate: with --baseline on local tmpfs in the same invocation (ops/s and the
#         GustFS/local ratio of the issue's goal);
#   cpu:  alone, timing the daemons' CPU (user + system ticks from /proc/PID/stat)
#         and the benchmark's (/usr/bin/time), per operation: steadier than rates on
#         a busy machine.
# Usage: bench/run_shm.sh [rounds] [files] [procs]   (GUST: the binary; VARIANTS). Output: a markdown table of medians on stdout, raw JSON
# lines in bench/results/shm-<date>.json.
set -euo pipefail
# shellcheck source=lib.sh
. "$(dirname "$0")/lib.sh"
cd "$BENCH_ROOT"
rounds=${1:-5} files=${2:-2000} procs=${3:-4}
# unix: the default; shm: GUST_TRANSPORT=shm; shm-yield: that, and clients poll with
# sched_yield for YIELD_US (default 50) µs before sleeping (GUST_SHM_YIELD_US).
# GUST_SHM_RING_KIB (passed to the daemons) sets the ring size.
variants=${VARIANTS:-unix shm shm-yield}
base=${BENCH_DIR:-/dev/shm}/gust-shm.$$
bench_scratch "$base"
out=$(bench_result shm)
mkdir -p "$base/local"
bench_start "$GUST" 4 "$base/fs"
export GUST_HOSTS_FILE="$base/fs/gust.hosts"
mapfile -t pids < <(bench_daemon_pids "$GUST_HOSTS_FILE")
: >"$out"
for round in $(seq 1 "$rounds"); do
  # shellcheck disable=SC2086 # the variants are words
  for v in $(bench_abba "$round" $variants); do
    transport=shm yield=0
    [ "$v" = unix ] && transport=unix
    [ "$v" = shm-yield ] && yield=${YIELD_US:-50}
    rate=$(GUST_TRANSPORT=$transport GUST_SHM_YIELD_US=$yield "$GUST" bench md -n "$files" -p "$procs" --target preload --baseline "$base/local" --json)
    before=$(bench_cpu_ticks "${pids[@]}")
    c=$({ GUST_TRANSPORT=$transport GUST_SHM_YIELD_US=$yield /usr/bin/time -f "%U %S" "$GUST" bench md -n "$files" -p "$procs" --target preload >/dev/null; } 2>&1 | tail -1)
    after=$(bench_cpu_ticks "${pids[@]}")
    ops=$((files * procs * 4))
    bench_stats record "$out" round:="$round" variant="$v" ops:="$ops" daemon_ticks:=$((after - before)) hz:="$BENCH_HZ" \
      client_cpu_s="$c" rate:="$rate"
  done
done
bench_py - "$out" <<'PY'
import sys
from stats import local_rate, median as med, rate as rate_of, read_jsonl
rows = read_jsonl(sys.argv[1])
def phases(v):
    d = {}
    for r in rows:
        if r["variant"] != v:
            continue
        for ph in r["rate"]["phases"]:
            d.setdefault(ph["phase"], []).append((rate_of(ph, "preload"), local_rate(ph)))
    return d
vs = list(dict.fromkeys(r["variant"] for r in rows))
P = {v: phases(v) for v in vs}
print("| phase | " + " | ".join(f"{v} ops/s" for v in vs) + " | local ops/s | " + " | ".join(f"{v}/local" for v in vs) + " | " + " | ".join(f"{v}/unix" for v in vs if v != "unix") + " |")
print("|---|" + "---:|" * (len(vs) * 3))
for ph in P[vs[0]]:
    rate = {v: med(x[0] for x in P[v][ph]) for v in vs}
    local = med([x[1] for v in vs for x in P[v][ph]])
    rel = {v: med(x[0] / x[1] for x in P[v][ph]) for v in vs}
    print(f"| {ph} | " + " | ".join(f"{rate[v]:,.0f}" for v in vs) + f" | {local:,.0f} | " + " | ".join(f"{rel[v]:.3f}" for v in vs)
          + " | " + " | ".join(f"{rate[v]/rate['unix']:.2f}" for v in vs if v != "unix") + " |")
def cpu(v):
    d, c = [], []
    for r in rows:
        if r["variant"] == v:
            d.append(r["daemon_ticks"] / r["hz"] / r["ops"] * 1e6)
            c.append(sum(map(float, r["client_cpu_s"].split())) / r["ops"] * 1e6)
    return med(d), med(c)
print(f"\nCPU µs per operation, median of {len(rows) // len(vs)} rounds (daemons + clients):")
for v in vs:
    d, c = cpu(v)
    print(f"  {v}: daemons {d:.1f} + clients {c:.1f} = {d + c:.1f}")
print(f"raw: {sys.argv[1]}", file=sys.stderr)
PY
