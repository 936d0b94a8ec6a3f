#!/usr/bin/env bash
# Runs every test: unit tests of each crate, the end-to-end tests (real daemon
# processes, real RocksDB, loopback only), the Python module's tests (its wheel
# built and installed into a virtual environment, a real instance), the bench scripts'
# shared code (bench/test_stats.py: bench/stats.py and bench/lib.sh), and a short run
# of every fuzz target (scripts/fuzz.sh smoke, about a minute once built). The object
# store tests (tests/s3) run a real SeaweedFS, built once by scripts/seaweedfs.sh;
# the MPI-IO tests run ROMIO's own test suite, built once by scripts/romio.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
. scripts/env.sh
./scripts/prune-target.sh
# A build of the workspace's test binaries takes about 6 GB, more with a cold
# dependency cache: say so before the linker dies of a full disk.
free_gib=$(df -P -BG "$CARGO_TARGET_DIR" 2>/dev/null | awk 'NR==2 {print $4+0}')
if [ -n "$free_gib" ] && [ "$free_gib" -lt 25 ]; then
  echo "test.sh: only ${free_gib} GiB free for $CARGO_TARGET_DIR; a cold build needs about 20" >&2
fi
cargo fmt --all -- --check
(cd fuzz && cargo fmt -- --check)
cargo build --release --workspace --all-targets
# The object store's event test (crates/objevents) and tests/s3 run a real SeaweedFS.
GUST_WEED="$(./scripts/seaweedfs.sh)"
export GUST_WEED
# ROMIO's own MPI-IO tests (tests/tests/mpi_io.rs), built from MPICH's source.
GUST_ROMIO="$(./scripts/romio.sh)"
export GUST_ROMIO
cargo test --release --workspace -- --test-threads="${GUST_TEST_THREADS:-2}"
. scripts/python-env.sh
"$GUST_PYTHON" -m pytest -q -p no:cacheprovider crates/python/tests
"$GUST_PYTHON" -m pytest -q -p no:cacheprovider tests/s3
"$GUST_PYTHON" -m pytest -q -p no:cacheprovider bench/test_stats.py
./scripts/fuzz.sh smoke
