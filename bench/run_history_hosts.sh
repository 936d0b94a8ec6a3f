#!/usr/bin/env bash
# Linearizability soak across three test hosts (network namespaces, as the test
# suite makes them): one `gust bench history` worker on each host over TCP, with
# workers SIGKILLed and SIGSTOPped, hosts' links set down (worker and daemon cut
# off) for 0.5-3 s, and daemons SIGSTOPped and SIGKILLed (started again in their
# namespaces) at random, seed 20261126, for SECONDS (default 600).
# Usage: bench/run_history_hosts.sh [SECONDS]   (root, iproute2)
# Output: the JSON report in bench/results/history-hosts-YYYYMMDD-HHMM.json and a
# line of summary.
set -euo pipefail
# shellcheck source=lib.sh
. "$(dirname "$0")/lib.sh"
cd "$BENCH_ROOT"
seconds=${1:-600}
out=$PWD/$(bench_result history-hosts)
GUST_SOAK_SECONDS=$seconds GUST_SOAK_REPORT=$out \
  cargo test --release -p gust-e2e --test netns_history soak_on_three_test_hosts -- --ignored --exact >/dev/null
bench_py - "$out" <<'PY'
import sys
from stats import read_json
r = read_json(sys.argv[1])
f = r.get("faults", {})
print(f"history on 3 hosts: {r['verdict']}: {r['operations']} operations in {r.get('rounds', 0)} round(s), "
      f"{r.get('run_seconds', 0):.0f} s, {f.get('kill', 0)} kills, {f.get('stop', 0)} stops, "
      f"{f.get('link_down', 0)} links down, {f.get('daemon_stop', 0)} daemon stops, {f.get('daemon_kill', 0)} daemon kills, {r['never_returned']} never returned, {r['violations']} violations; "
      f"report {sys.argv[1]}")
PY
