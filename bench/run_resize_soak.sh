#!/usr/bin/env bash
# Moves with daemons killed (issue 34; docs/DESIGN.md, "Growing and shrinking"): the
# test suite's `moves_with_daemons_killed_lose_nothing` (tests/tests/resize.rs) run
# for SECONDS with each SEED: grows and shrinks of a local instance one after the
# other, a daemon the instance had before each command killed with SIGKILL at a
# random point of it (two moves in three) and started again, `--resume` until the
# move ends, every file read back and listed after each move, and `gust bench
# history`'s workers checked for linearizability through all of it.
# Usage: bench/run_resize_soak.sh [seconds] [seeds...]   (defaults 600 1)
# Output of each run in bench/results/resize-soak-<date>.txt; its last line per seed;
# the daemons' logs of a move that did not end in resize-soak-<date>-logs-<seed>/.
set -euo pipefail
# shellcheck source=lib.sh
. "$(dirname "$0")/lib.sh"
cd "$BENCH_ROOT"
seconds=${1:-600}
shift || true
seeds=("${@:-1}")
[ ${#seeds[@]} -gt 0 ] || seeds=(1)
out=$(bench_result resize-soak .txt)
: > "$out"
for seed in "${seeds[@]}"; do
  echo "seed $seed, $seconds s" | tee -a "$out"
  logs="${out%.txt}-logs-$seed"
  mkdir -p "$logs"
  GUST_SOAK_SECONDS=$seconds GUST_SOAK_SEED=$seed GUST_SOAK_LOGS=$BENCH_ROOT/$logs \
    cargo test --release -q -p gust-e2e --test resize -- --exact moves_with_daemons_killed_lose_nothing \
    --nocapture >> "$out" 2>&1 || { echo "seed $seed FAILED (see $out and $logs)"; exit 1; }
  rmdir "$logs" 2>/dev/null || true
  grep -E "moves, .* violations" "$out" | tail -1
done
