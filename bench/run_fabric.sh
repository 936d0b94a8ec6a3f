#!/usr/bin/env bash
# HPC networks (issue 32): the same instance's daemons reached over their libfabric
# endpoint (`gust start --fabric PROVIDER`, GUST_TRANSPORT=fabric) and over TCP
# (GUST_TRANSPORT=tcp), alternating round by round, client API: `gust bench md`
# (creates, removes) and `gust bench io` (1 MiB transfers). On one machine the
# fabric is tcp;ofi_rxm (sockets under libfabric's reliable-datagram layer) or shm,
# so this measures what the layer costs, not what verbs, CXI or EFA would give.
# Usage: bench/run_fabric.sh [rounds] [provider]   (GUST: the binary). Output: the
# rates per round on stdout and in bench/results/fabric-<provider>-<date>.txt.
set -euo pipefail
# shellcheck source=lib.sh
. "$(dirname "$0")/lib.sh"
cd "$BENCH_ROOT"
rounds=${1:-3} provider=${2:-tcp;ofi_rxm}
base=${BENCH_DIR:-/dev/shm}/gust-fabric.$$
bench_scratch "$base"
out=$(bench_result "fabric-${provider//[^a-z0-9]/-}" .txt)
bench_start "$GUST" 4 "$base/fs" --fabric "$provider"
export GUST_HOSTS_FILE="$base/fs/gust.hosts"
for round in $(seq 1 "$rounds"); do
  for t in $(bench_abba "$round" fabric tcp); do
    echo "== round $round, $t ($provider)"
    GUST_TRANSPORT=$t "$GUST" bench md -n 2000 -p 2 | grep -E "create|remove"
    GUST_TRANSPORT=$t "$GUST" bench io -b 64MiB -p 2 | tail -2
  done
done | tee "$out"
