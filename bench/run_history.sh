#!/usr/bin/env bash
# Linearizability soak: a fresh 4-daemon instance (on /dev/shm) and `gust bench
# history` with 4 worker processes on 8 shared paths for SECONDS (default 600), with
# workers SIGKILLed (and replaced) and SIGSTOPped for 0.5-3 s at random, and daemons
# SIGSTOPped for 0.5-3 s (past a lease) and SIGKILLed (started again 0.2-1.5 s
# later on their root directories), fixed seed.
# The run goes in rounds of 10 s, each checked as it ends; it stops at the first
# violation. This build's `gust` ($GUST, scripts/env.sh).
# Usage: bench/run_history.sh [SECONDS]
# Output: the JSON report in bench/results/history-YYYYMMDD-HHMM.json, and on a
# violation the history of the round that broke in history-YYYYMMDD-HHMM.jsonl
# beside it (`gust bench history --check FILE` explains it again); one line of
# summary on stdout. Exit status as gust bench history's: 0 linearizable, 1 a
# violation, 2 undecided, 3 the run failed.
# Storage: BENCH_DIR (default /dev/shm). Seed: SEED (default 20261126). Faults:
# FAULTS (default kill,stop,daemon-stop,daemon-kill). NODE_CACHE=1: workers
# without claims whose stats the node cache answers, on PATHS (default 512) shared
# paths.
set -euo pipefail
# shellcheck source=lib.sh
. "$(dirname "$0")/lib.sh"
cd "$BENCH_ROOT"
seconds=${1:-600}
seed=${SEED:-20261126}
faults=${FAULTS:-kill,stop,daemon-stop,daemon-kill}
root=${BENCH_DIR:-/dev/shm}/gust-history.$$
bench_scratch "$root"
out=$(bench_result history)
kept=${out%.json}.jsonl
# NODE_CACHE=1: workers without claims, whose stats the node cache answers
# (`--node-cache`), on more shared paths (each changed now and then).
node_cache=()
paths=${PATHS:-8}
if [ "${NODE_CACHE:-0}" = 1 ]; then
  node_cache=(--node-cache)
  paths=${PATHS:-512}
fi
bench_start "$GUST" 4 "$root"
rc=0
GUST_HOSTS_FILE="$root/gust.hosts" "$GUST" bench history --workers 4 --seconds "$seconds" --paths "$paths" \
  --seed "$seed" --dir /history --faults "$faults" "${node_cache[@]}" --json --keep-history "$kept" > "$out" || rc=$?
[ "$rc" = 1 ] || rm -f "$kept"
bench_py - "$out" "$rc" <<'PY'
import sys
from stats import read_json
path, rc = sys.argv[1], int(sys.argv[2])
try:
    r = read_json(path)
except ValueError:
    sys.exit(f"history: no report in {path} (exit {rc}); see the messages above")
f = r.get("faults", {})
print(f"history: {r['verdict']}: {r['operations']} operations in {r.get('rounds', 0)} round(s), "
      f"{r.get('run_seconds', 0):.0f} s ({r.get('ops_per_second', 0):.0f} ops/s), "
      f"{f.get('kill', 0)} kills, {f.get('stop', 0)} stops, {f.get('daemon_stop', 0)} daemon stops, {f.get('daemon_kill', 0)} daemon kills, "
      f"{r['never_returned']} never returned, "
      f"{r['indeterminate']} errors outside the model, {r['violations']} violations, "
      f"{r.get('batches', {}).get('create_inline_batch', 0)} create and "
      f"{r.get('batches', {}).get('remove_batch', 0)} remove batches under claims, "
      f"{r.get('node_cache_hits', 0)} lookups from the node cache, "
      f"checked in {r['check_seconds']:.1f} s; report {path}")
PY
exit "$rc"
