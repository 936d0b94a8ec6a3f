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
# shellcheck source=lib.sh
. "$(dirname "$0")/lib.sh"
cd "$BENCH_ROOT"
rounds=${1:-3} files=${2:-10000} procs=4
base=${BENCH_DIR:-/dev/shm}/gust-grants.$$
bench_scratch "$base"
out=$(bench_result grants)
mkdir -p "$base/local"
bench_start "$GUST" 4 "$base/fs"
export GUST_HOSTS_FILE="$base/fs/gust.hosts"
mapfile -t pids < <(bench_daemon_pids "$GUST_HOSTS_FILE")
args_of() {
  case $1 in
    md0) echo "--no-excl" ;;
    md4k) echo "--no-excl --size 4096" ;;
    shared) echo "--no-excl --shared-dir" ;;
    excl) echo "" ;;
  esac
}
: >"$out"
for round in $(seq 1 "$rounds"); do
  order=$(bench_abba "$round" grants none)
  for w in md0 md4k shared excl; do
    for v in $order; do
      g=1
      [ "$v" = none ] && g=0
      # shellcheck disable=SC2046
      rate=$(GUST_GRANTS=$g "$GUST" bench md -n "$files" -p "$procs" $(args_of "$w") --target preload \
        --baseline "$base/local" --json)
      cpu='null'
      if [ "$w" = md0 ]; then
        before=$(bench_cpu_ticks "${pids[@]}")
        # shellcheck disable=SC2046
        c=$({ GUST_GRANTS=$g /usr/bin/time -f "%U %S" "$GUST" bench md -n "$files" -p "$procs" $(args_of "$w") \
          --target preload >/dev/null; } 2>&1 | tail -1)
        after=$(bench_cpu_ticks "${pids[@]}")
        cpu=$(printf '{"ops": %d, "daemon_s": %s, "client_s": %s}' $((files * procs * 4)) \
          "$(bench_div $((after - before)) "$BENCH_HZ")" "$(echo "$c" | awk '{print $1 + $2}')")
      fi
      bench_stats record "$out" round:="$round" workload="$w" variant="$v" cpu:="$cpu" rate:="$rate"
    done
  done
done
bench_py - "$out" <<'PY'
import sys
from stats import median as med, read_jsonl
rows = read_jsonl(sys.argv[1])
for w in dict.fromkeys(r["workload"] for r in rows):
    print(f"\n{w}: ops/s (GustFS/local), median of {len(rows) // 8} rounds")
    print("| phase | grants | none | grants/none |")
    print("|---|---:|---:|---:|")
    phases = {}
    for r in rows:
        if r["workload"] != w:
            continue
        for ph in r["rate"]["phases"]:
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
