#!/usr/bin/env bash
# Runs every test: unit tests of each crate and the end-to-end tests (real daemon
# processes, real RocksDB, loopback only).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
. scripts/env.sh
cargo fmt --all -- --check
cargo build --release --workspace --all-targets
cargo test --release --workspace -- --test-threads="${GUST_TEST_THREADS:-2}"
