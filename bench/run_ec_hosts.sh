#!/usr/bin/env bash
# Erasure codes against copies on six test hosts (network namespaces, as the test
# suite makes them: tests/tests/netns_erasure.rs, `bandwidth_on_six_test_hosts`):
# `ec 4+2` (256 KiB cells: 1 MiB stripes, the default) against R=1 and R=2 (512 KiB
# chunks), a fresh instance per round and way, the ways in rotated order. Two dd's
# on hosts 0 and 1 through the preload library, every byte over TCP (as other
# nodes' data on a cluster), copy MiB each in with 1 MiB blocks, then read it
# back; for 4+2 also with hosts 2's and 5's daemons killed (two cells of every
# stripe lost).
# Usage: bench/run_ec_hosts.sh [rounds] [MiB per process]   (root, iproute2)
# Output: medians, ratios to R=1; rounds in bench/results/ec-hosts-*.json.
set -euo pipefail
# shellcheck source=lib.sh
. "$(dirname "$0")/lib.sh"
cd "$BENCH_ROOT"
rounds=${1:-3} mib=${2:-256}
out=$PWD/$(bench_result ec-hosts)
GUST_EC_ROUNDS=$rounds GUST_EC_MIB=$mib GUST_EC_REPORT=$out \
  cargo test --release -p gust-e2e --test netns_erasure bandwidth_on_six_test_hosts -- --ignored --exact >/dev/null
bench_py - "$out" <<'PY'
import json, sys
from stats import median
rows = [json.loads(l) for l in open(sys.argv[1])]
def med(way, key):
    return median([r["bytes"] / 2**20 / r[key] for r in rows if r["way"] == way and r[key] is not None])
n = len([r for r in rows if r["way"] == "r1"])
print(f"{'':<8} {'write MiB/s':>12} {'vs R=1':>7} {'read MiB/s':>11} {'vs R=1':>7}   (six test hosts, over TCP, medians of {n})")
for way, name in [("r1", "R=1"), ("r2", "R=2"), ("ec", "EC 4+2")]:
    w, r = med(way, "write_s"), med(way, "read_s")
    print(f"{name:<8} {w:>12.0f} {w / med('r1', 'write_s'):>7.2f} {r:>11.0f} {r / med('r1', 'read_s'):>7.2f}")
d = med("ec", "degraded_read_s")
print(f"EC 4+2 reads with two hosts' daemons killed: {d:.0f} MiB/s, {d / med('ec', 'read_s'):.2f} of healthy reads")
print(f"rounds: {sys.argv[1]}")
PY
