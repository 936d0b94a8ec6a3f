#!/usr/bin/env bash
# Staging against an object store (issue 35): `gust stage in|out s3://…` against
# boto3's transfer manager (what `aws s3 cp --recursive` runs) on the same SeaweedFS,
# large objects (1-256 MiB) and small ones (4 KiB), same round.
# Usage: bench/run_s3_stage.sh [rounds] [large MiB] [small count]   (defaults 3 1024 10000)
# Data on BENCH_DIR (default /dev/shm): the store's volumes, GustFS's chunks and
# boto3's local copy are all there, so the transfer is measured, not a disk.
set -euo pipefail
# shellcheck source=lib.sh
. "$(dirname "$0")/lib.sh"
cd "$BENCH_ROOT"
bench_build -p gust-cli
bench_python_env
GUST_WEED="$(./scripts/seaweedfs.sh)" "$GUST_PYTHON" bench/s3_stage.py "${1:-3}" "${2:-1024}" "${3:-10000}"
