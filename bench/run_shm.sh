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
cd "$(dirname "$0")/.."
. scripts/env.sh
rounds=${1:-5} files=${2:-2000} procs=${3:-4}
# unix: the default; shm: GUST_TRANSPORT=shm; shm-yield: that, and clients poll with
# sched_yield for YIELD_US (default 50) µs before sleeping (GUST_SHM_YIELD_US).
# GUST_SHM_RING_KIB (passed to the daemons) sets the ring size.
variants=${VARIANTS:-unix shm shm-yield}
base=${BENCH_DIR:-/dev/shm}/gust-shm.$$
out=bench/results/shm-$(date +%Y%m%d-%H%M).json
hz=$(getconf CLK_TCK)
mkdir -p "$base/local" bench/results
cleanup() {
  "$GUST" stop --rootdir "$base/fs" >/dev/null 2>&1 || true
  rm -rf "$base"
}
trap cleanup EXIT
"$GUST" start --local 4 --rootdir "$base/fs" >/dev/null
export GUST_HOSTS_FILE="$base/fs/gust.hosts"
pids=$(awk '$1 == "daemon" {print $4}' "$GUST_HOSTS_FILE")
ticks() {
  local t=0
  for p in $pids; do t=$((t + $(awk '{print $14 + $15}' "/proc/$p/stat"))); done
  echo "$t"
}
: >"$out"
for round in $(seq 1 "$rounds"); do
  if ((round % 2)); then order=$variants; else order=$(echo "$variants" | tr ' ' '\n' | tac | tr '\n' ' '); fi
  for v in $order; do
    transport=shm yield=0
    [ "$v" = unix ] && transport=unix
    [ "$v" = shm-yield ] && yield=${YIELD_US:-50}
    rate=$(GUST_TRANSPORT=$transport GUST_SHM_YIELD_US=$yield "$GUST" bench md -n "$files" -p "$procs" --target preload --baseline "$base/local" --json)
    before=$(ticks)
    c=$({ GUST_TRANSPORT=$transport GUST_SHM_YIELD_US=$yield /usr/bin/time -f "%U %S" "$GUST" bench md -n "$files" -p "$procs" --target preload >/dev/null; } 2>&1 | tail -1)
    after=$(ticks)
    ops=$((files * procs * 4))
    printf '{"round": %d, "variant": "%s", "ops": %d, "daemon_ticks": %d, "hz": %d, "client_cpu_s": "%s", "rate": %s}\n' \
      "$round" "$v" "$ops" $((after - before)) "$hz" "$c" "$(echo "$rate" | tr -d '\n ')" >>"$out"
  done
done
python3 - "$out" <<'PY'
import json, statistics as st, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
med = st.median
def phases(v):
    d = {}
    for r in rows:
        if r["variant"] != v:
            continue
        for ph in r["rate"]["phases"]:
            local = next(k for k in ph if k.startswith("posix:"))
            d.setdefault(ph["phase"], []).append((ph["preload"]["median_rate"], ph[local]["median_rate"]))
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
