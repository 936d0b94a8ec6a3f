#!/usr/bin/env bash
# Runs every test: unit tests of each crate, the end-to-end tests (real daemon
# processes, real RocksDB, loopback only), and the Python module's tests (its wheel
# built and installed into a virtual environment, a real instance).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
. scripts/env.sh
cargo fmt --all -- --check
cargo build --release --workspace --all-targets
cargo test --release --workspace -- --test-threads="${GUST_TEST_THREADS:-2}"
. scripts/python-env.sh
"$GUST_PYTHON" -m pytest -q -p no:cacheprovider crates/python/tests
