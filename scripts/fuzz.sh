#!/usr/bin/env bash
# Fuzzing with cargo-fuzz (libFuzzer): the targets in fuzz/fuzz_targets, seeded from
# fuzz/corpus. What each target checks and the results of the long run:
# docs/FUZZING.md.
#
#   scripts/fuzz.sh smoke            every target for GUST_FUZZ_SECONDS (default 10)
#                                    seconds; fails on any crash or hang (test.sh)
#   scripts/fuzz.sh long [RUNS]      every target for RUNS inputs (default 10,000,000),
#                                    one after the other, then a summary
#   scripts/fuzz.sh run TARGET [ARG...]  one target, with libFuzzer's arguments
#   scripts/fuzz.sh seeds            rewrites the seed corpus fuzz/corpus (commit it)
#
# Runs grow their own corpus and keep crash inputs ("artifacts") and logs under
# GUST_FUZZ_WORK (default ~/.cache/gustfs-fuzz), never in the clone: fuzz/corpus holds
# the seeds only. The build goes to GUST_FUZZ_TARGET_DIR (default
# ~/.cache/gustfs-fuzz-target), outside the clone so that later runs reuse it.
set -euo pipefail
cd "$(dirname "$0")/.."

TARGETS=(frame request reply handshake hosts path record trace)
TARGET_DIR="${GUST_FUZZ_TARGET_DIR:-$HOME/.cache/gustfs-fuzz-target}"
WORK="${GUST_FUZZ_WORK:-$HOME/.cache/gustfs-fuzz}"
# Longest input tried: past PATH_BYTES_MAX (4096), so that the path target reaches
# the length limits.
MAX_LEN=8192
# An input that takes longer than this (seconds) is reported as a hang.
HANG_SECONDS=10

die() {
  echo "fuzz: $*" >&2
  exit 1
}

rustup run nightly rustc --version >/dev/null 2>&1 ||
  die "needs the nightly toolchain (rustup toolchain install nightly --profile minimal; scripts/setup.sh does it)"
cargo fuzz --version >/dev/null 2>&1 || die "needs cargo-fuzz (cargo install cargo-fuzz --locked; scripts/setup.sh does it)"
HOST="$(rustup run nightly rustc -vV | sed -n 's/^host: //p')"
BIN="$TARGET_DIR/$HOST/release"

# Release with debug assertions and overflow checks (cargo-fuzz's default). No
# sanitizer: the code under test is safe Rust, whose bounds and overflow checks are
# what a sanitizer would add, and without it a target runs about twice as fast.
build() {
  (cd fuzz && cargo +nightly fuzz build --sanitizer none --target-dir "$TARGET_DIR" "$@")
}

# run TARGET LOG [libFuzzer args]: the target over its grown corpus and the seeds.
run() {
  local t=$1 log=$2
  shift 2
  mkdir -p "$WORK/corpus/$t" "$WORK/artifacts" "$(dirname "$log")"
  "$BIN/$t" "$WORK/corpus/$t" "fuzz/corpus/$t" -artifact_prefix="$WORK/artifacts/$t-" \
    -max_len=$MAX_LEN -timeout=$HANG_SECONDS -print_final_stats=1 "$@" >"$log" 2>&1
}

# The summary line of a finished run: inputs, seconds, inputs per second, the
# slowest input (seconds, libFuzzer rounds down), peak memory, coverage at the end.
summary() {
  local t=$1 log=$2 rc=$3 secs=$4
  local runs slow rss cov
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  slow=$(sed -n 's/^stat::slowest_unit_time_sec: *//p' "$log" | tail -1)
  rss=$(sed -n 's/^stat::peak_rss_mb: *//p' "$log" | tail -1)
  cov=$(grep -oE 'cov: [0-9]+ ft: [0-9]+ corp: [0-9]+' "$log" | tail -1)
  local result=ok
  if [ "$rc" -ne 0 ]; then
    result="FAILED (exit $rc): $(grep -m1 -E 'panicked at|ERROR: libFuzzer' "$log" || echo see log)"
  fi
  printf '%-10s %9s inputs %6ss %7s/s  slowest %ss  %4s MiB  %-30s %s\n' "$t" "${runs:-?}" "$secs" \
    "$(((${runs:-0}) / (secs > 0 ? secs : 1)))" "${slow:-?}" "${rss:-?}" "${cov:-}" "$result"
}

each() {
  local mode=$1 failed=0 start rc
  shift
  for t in "${TARGETS[@]}"; do
    local log="$WORK/logs/$mode-$t.log"
    start=$(date +%s)
    rc=0
    run "$t" "$log" "$@" || rc=$?
    summary "$t" "$log" "$rc" "$(($(date +%s) - start))"
    if [ "$rc" -ne 0 ]; then
      failed=1
      tail -40 "$log" >&2
    fi
  done
  if [ "$failed" -ne 0 ]; then
    die "a target failed; crash inputs are in $WORK/artifacts (replay: $BIN/TARGET FILE)"
  fi
}

case "${1:-}" in
smoke)
  build
  each smoke -max_total_time="${GUST_FUZZ_SECONDS:-10}"
  ;;
long)
  runs="${2:-10000000}"
  build
  echo "fuzz: $runs inputs per target, logs in $WORK/logs ($(date -u +%FT%TZ))"
  each long -runs="$runs"
  echo "fuzz: done ($(date -u +%FT%TZ))"
  ;;
run)
  [ $# -ge 2 ] || die "usage: scripts/fuzz.sh run TARGET [libFuzzer args]"
  t=$2
  shift 2
  build
  mkdir -p "$WORK/corpus/$t" "$WORK/artifacts"
  exec "$BIN/$t" "$WORK/corpus/$t" "fuzz/corpus/$t" -artifact_prefix="$WORK/artifacts/$t-" \
    -max_len=$MAX_LEN -timeout=$HANG_SECONDS "$@"
  ;;
seeds)
  (cd fuzz && CARGO_TARGET_DIR="$TARGET_DIR" cargo run --release --example seeds)
  ;;
*)
  die "usage: scripts/fuzz.sh smoke | long [RUNS] | run TARGET [ARG...] | seeds"
  ;;
esac
