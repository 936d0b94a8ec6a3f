#!/usr/bin/env bash
# The node cache (docs/DESIGN.md, "The node cache") against none, in the same run:
# each round starts a fresh 4-daemon instance per way (on /dev/shm), `node` with
# the default settings and `off` with GUST_NODE_CACHE=0 for its daemons and
# clients, ways alternating ABBA round by round, and measures
#   * the Python data loader (bench/loader.py: 4 worker processes, gustfs.open per
#     file, each epoch a new random share of FILES files of ~100 KiB), epoch by
#     epoch, against the local copy (tmpfs) read the same way in the same round;
#   * the same loader started again 2 s after the first ended (new processes, 2
#     epochs): what a data set the holder has is read at ("warm");
#   * mdtest -N 1 through the preload library (`gust bench md --no-excl --shift 1`,
#     4 processes x MD_FILES: every phase after the creates on another process's
#     files, the contended case the node cache must not make slower).
# Usage: bench/run_node_cache.sh [ROUNDS]   (default 3)
# Output: tables of medians on stdout (files/s and GustFS/local per epoch; md
# phases' ops/s and node/off), raw JSON lines in bench/results/node-cache-<date>.json.
# Knobs: BENCH_FILES (default 4000), BENCH_EPOCHS (default 3), MD_FILES (default
# 5000), BENCH_DIR.
# shellcheck source=lib.sh
set -euo pipefail
. "$(dirname "$0")/lib.sh"
cd "$BENCH_ROOT"
bench_build --workspace
bench_python_env
rounds=${1:-3}
files=${BENCH_FILES:-4000}
md_files=${MD_FILES:-5000}
base=${BENCH_DIR:-/dev/shm}/gust-node-cache.$$
bench_scratch "$base"
mkdir -p "$base/local"
out=$(bench_result node-cache .json)
: >"$out"
made_local=0
read_args=(--manifest-dir "$base/local" --workers 4 --epochs "${BENCH_EPOCHS:-3}")
for round in $(seq 1 "$rounds"); do
  for way in $(bench_abba "$round" node off); do
    nc=1G
    [ "$way" = off ] && nc=0
    root="$base/fs-$way-$round"
    GUST_NODE_CACHE=$nc bench_start "$GUST" 4 "$root"
    eval "$("$GUST" env --rootdir "$root")" # GUST_HOSTS_FILE, GUST_MOUNTDIR
    hosts=$GUST_HOSTS_FILE
    if [ "$made_local" = 0 ]; then
      GUST_HOSTS_FILE=$hosts "$GUST_PYTHON" bench/loader.py make --files "$files" --local "$base/local" --gust /loader
      made_local=1
    else
      GUST_HOSTS_FILE=$hosts "$GUST_PYTHON" bench/loader.py make --files "$files" --local "$base/local" \
        --gust /loader --gust-only
    fi
    loader=$(GUST_NODE_CACHE=$nc GUST_HOSTS_FILE=$hosts "$GUST_PYTHON" bench/loader.py read \
      --target gust:/loader "${read_args[@]}")
    local_run=$("$GUST_PYTHON" bench/loader.py read --target "posix:$base/local" "${read_args[@]}")
    # The holder fills in the background: 2 s is past its fill of the default
    # data set on this machine (~1.2 s).
    sleep 2
    warm=$(GUST_NODE_CACHE=$nc GUST_HOSTS_FILE=$hosts "$GUST_PYTHON" bench/loader.py read \
      --target gust:/loader --manifest-dir "$base/local" --workers 4 --epochs 2)
    md=$(GUST_NODE_CACHE=$nc GUST_HOSTS_FILE=$hosts "$GUST" bench md -n "$md_files" -p 4 --no-excl --shift 1 \
      --target preload --json)
    bench_stats record "$out" round:="$round" way="$way" loader:="$loader" local:="$local_run" warm:="$warm" md:="$md"
    bench_stop "$GUST" "$root"
  done
done
bench_py - "$out" <<'PY'
import sys
from stats import median as med, read_jsonl
rows = read_jsonl(sys.argv[1])
ways = ("node", "off")
by = {w: [r for r in rows if r["way"] == w] for w in ways}
n = len(by["node"])
def rate(e):
    return e["files"] / e["seconds"]
print(f"data loader, gustfs.open per file, files/s (GustFS/local of the same round), medians of {n} rounds")
print("| epoch | node cache | none | node/none |")
print("|---|---:|---:|---:|")
for epoch in range(len(rows[0]["loader"]["epochs"])):
    cells = {}
    for w in ways:
        rs = [rate(r["loader"]["epochs"][epoch]) for r in by[w]]
        ratios = [rate(r["loader"]["epochs"][epoch]) / rate(r["local"]["epochs"][epoch]) for r in by[w]]
        cells[w] = (med(rs), med(ratios))
    print(f"| {epoch + 1} | {cells['node'][0]:,.0f} ({cells['node'][1]:.2f}) | {cells['off'][0]:,.0f} "
          f"({cells['off'][1]:.2f}) | {cells['node'][0] / cells['off'][0]:.2f} |")
if all("warm" in r for r in rows):
    print(f"\nthe loader again, new processes, 2 s after: files/s (GustFS/local's last epoch of the round)")
    print("| epoch | node cache | none | node/none |")
    print("|---|---:|---:|---:|")
    for epoch in range(2):
        v = {w: (med(rate(r["warm"]["epochs"][epoch]) for r in by[w]),
                 med(rate(r["warm"]["epochs"][epoch]) / rate(r["local"]["epochs"][-1]) for r in by[w])) for w in ways}
        print(f"| {epoch + 1} | {v['node'][0]:,.0f} ({v['node'][1]:.2f}) | {v['off'][0]:,.0f} ({v['off'][1]:.2f}) | "
              f"{v['node'][0] / v['off'][0]:.2f} |")
print(f"\nmdtest -N 1 through the preload library, ops/s, medians of {n} rounds")
print("| phase | node cache | none | node/none |")
print("|---|---:|---:|---:|")
phases = [p["phase"] for p in rows[0]["md"]["phases"]]
for ph in phases:
    v = {w: med(p["preload"]["median_rate"] for r in by[w] for p in r["md"]["phases"] if p["phase"] == ph)
         for w in ways}
    print(f"| {ph} | {v['node']:,.0f} | {v['off']:,.0f} | {v['node'] / v['off']:.2f} |")
print(f"raw: {sys.argv[1]}", file=sys.stderr)
PY
