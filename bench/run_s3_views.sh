#!/usr/bin/env bash
# Views of an object store prefix (issue 35, `gust view`) on a real SeaweedFS: the
# latency from an S3 PUT to the object's entry in a view kept by the store's events,
# at a paced write rate; `ls -l` of a view of N objects (FUSE mount and preload
# library) against s3fs-fuse and rclone mount listing the same prefix, cold; the
# view's first resync and a resync of the unchanged view.
# Usage: bench/run_s3_views.sh [rounds] [N objects] [PUT rate/s] [seconds]
#        (defaults 3 100000 1000 10)
# Env: BENCH_DIR (default /dev/shm: the store's volumes and GustFS's data),
# BENCH_PHASES=events,list, BENCH_LS_TIMEOUT (s3fs and rclone, default 1800 s),
# BENCH_WRITERS / BENCH_THREADS (writer processes x threads, default 3 x 16),
# GUST_BENCH_NO_BUILD=1: use the built binary and the installed gustfs module as they
# are ($GUST, $GUST_PYENV/bin/python) instead of building them first.
set -euo pipefail
# shellcheck source=lib.sh
. "$(dirname "$0")/lib.sh"
cd "$BENCH_ROOT"
need=()
command -v s3fs >/dev/null || need+=(s3fs)
command -v rclone >/dev/null || need+=(rclone)
command -v fusermount3 >/dev/null || need+=(fuse3)
if [ ${#need[@]} -gt 0 ]; then
  echo "run_s3_views: installing ${need[*]}" >&2
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
fi
bench_build -p gust-cli
bench_python_env
GUST_WEED="$(./scripts/seaweedfs.sh)" "$GUST_PYTHON" bench/s3_views.py "${1:-3}" "${2:-100000}" "${3:-1000}" "${4:-10}"
