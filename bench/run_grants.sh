#!/usr/bin/env bash
# Grants (issue 29): the same build with grants (the default) and without
# (GUST_GRANTS=0), same daemons, same run, alternating ABBA round by round, each
# against local tmpfs in the same invocation. Workloads through the LD_PRELOAD
# library, 4 processes, `gust bench md` (mdtest's phases: create, stat, open+read+
# close, remove; a directory per process unless "shared"):
#   md0:     0-byte files, O_CREAT|O_WRONLY as mdtest opens them (--no-excl)
#   md4k:    4 KiB files (mdtest -w 4096 -e 4096)
#   shared:  0-byte files, all processes in one directory (the contended create)
#   excl:    0-byte files created with O_EXCL (not deferred: one create request)
# and for md0 the CPU time of daemons and clients per operation (CPU per operation
# is what a grant or recall costs when nothing is reused: see the create and remove
# phases, which reuse nothing).
# Usage: bench/run_grants.sh [rounds] [files]   (GUST: the binary). Output: markdown
# tables of medians on stdout, raw JSON lines in bench/results/grants-<date>.json.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/env.sh
rounds=${1:-3} files=${2:-10000} procs=4
base=${BENCH_DIR:-/dev/shm}/gust-grants.$$
out=bench/results/grants-$(date +%Y%m%d-%H%M).json
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
args_of() {
  case $1 in
    md0) echo "--no-excl" ;;
    md4k) echo "--no-excl --size 4096" ;;
    shared) echo "--no-excl --shared-dir" ;;
    excl) echo "" ;;
  esac
}
: >"$out"
variants="grants none"
for round in $(seq 1 "$rounds"); do
  if ((round % 2)); then order=$variants; else order="none grants"; fi
  for w in md0 md4k shared excl; do
    for v in $order; do
      g=1
      [ "$v" = none ] && g=0
      # shellcheck disable=SC2046
      rate=$(GUST_GRANTS=$g "$GUST" bench md -n "$files" -p "$procs" $(args_of "$w") --target preload \
        --baseline "$base/local" --json)
      cpu='null'
      if [ "$w" = md0 ]; then
        before=$(ticks)
        # shellcheck disable=SC2046
        c=$({ GUST_GRANTS=$g /usr/bin/time -f "%U %S" "$GUST" bench md -n "$files" -p "$procs" $(args_of "$w") \
          --target preload >/dev/null; } 2>&1 | tail -1)
        after=$(ticks)
        cpu=$(printf '{"ops": %d, "daemon_s": %s, "client_s": %s}' $((files * procs * 4)) \
          "$(echo "$((after - before)) $hz" | awk '{print $1 / $2}')" "$(echo "$c" | awk '{print $1 + $2}')")
      fi
      printf '{"round": %d, "workload": "%s", "variant": "%s", "cpu": %s, "rate": %s}\n' \
        "$round" "$w" "$v" "$cpu" "$(echo "$rate" | tr -d '\n ')" >>"$out"
    done
  done
done
python3 - "$out" <<'PY'
import json, statistics as st, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
med = st.median
for w in dict.fromkeys(r["workload"] for r in rows):
    print(f"\n{w}: ops/s (GustFS/local), median of {len(rows) // 8} rounds")
    print("| phase | grants | none | grants/none |")
    print("|---|---:|---:|---:|")
    phases = {}
    for r in rows:
        if r["workload"] != w:
            continue
        for ph in r["rate"]["phases"]:
            local = next(k for k in ph if k.startswith("posix:"))
            phases.setdefault(ph["phase"], {}).setdefault(r["variant"], []).append(
                (ph["preload"]["median_rate"], ph["ratio"]))
    for ph, by in phases.items():
        g, n = by["grants"], by["none"]
        cell = lambda x: f"{med(a for a, _ in x):,.0f} ({med(b for _, b in x):.3f})"
        print(f"| {ph} | {cell(g)} | {cell(n)} | {med(a for a, _ in g) / med(a for a, _ in n):.2f} |")
print("\nmd0, CPU µs per operation (daemons + clients), median:")
for v in ("grants", "none"):
    c = [r["cpu"] for r in rows if r["workload"] == "md0" and r["variant"] == v]
    d = med(x["daemon_s"] / x["ops"] * 1e6 for x in c)
    k = med(x["client_s"] / x["ops"] * 1e6 for x in c)
    print(f"  {v}: daemons {d:.1f} + clients {k:.1f} = {d + k:.1f}")
print(f"raw: {sys.argv[1]}", file=sys.stderr)
PY
