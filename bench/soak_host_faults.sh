#!/usr/bin/env bash
# Soak run of the host fault schedule (tests/tests/host_faults.rs): three test hosts
# in network namespaces, two replicas, FAULTS seeded faults (kill -9 during writes,
# SIGSTOP, link down, a partial partition), every acknowledged write read back
# after each. Needs root; build the workspace first (cargo build --release
# --workspace --all-targets).
# Usage: bench/soak_host_faults.sh [faults] [seed]
# Output: the test's log in bench/results/soak_host_faults-DATE.txt (seed, each round,
# slow writes, the total).
set -euo pipefail
# shellcheck source=lib.sh
. "$(dirname "$0")/lib.sh"
faults=${1:-40}
seed=${2:-$(od -An -N8 -tu8 /dev/urandom | tr -d ' ')}
cd "$BENCH_ROOT"
out=$(bench_result soak_host_faults .txt)
{
  echo "# bench/soak_host_faults.sh $faults $seed  ($(date -u +%FT%TZ), $(nproc) cores)"
  GUST_FAULTS=$faults GUST_TEST_SEED=$seed cargo test --release --workspace --test host_faults -- --nocapture 2>&1 |
    grep -E '^host faults|panicked|test result'
} | tee "$out"
