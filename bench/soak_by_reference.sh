#!/usr/bin/env bash
# Soak of replies by reference (daemon server/splice.rs): the data loader reads
# its data set in batches with every file's crc32 checked (bench/loader.py
# --verify), while bench/churn.py rewrites other files as fast as it can, so that
# memtables fill, flush and are freed and tables are compacted and deleted under
# replies in flight. A value sent by reference from memory that is then reused
# would arrive changed and fail the check. Bounded: CHURN_SECONDS of churn
# (default 60), READS loader runs of 2 epochs (default 4) while it goes.
# Usage: bench/soak_by_reference.sh   (BENCH_FILES 20000, BENCH_DAEMONS 4)
set -euo pipefail
# shellcheck source=lib.sh
. "$(dirname "$0")/lib.sh"
cd "$BENCH_ROOT"
bench_build --workspace --all-targets
bench_python_env
files=${BENCH_FILES:-20000}
daemons=${BENCH_DAEMONS:-4}
base=${BENCH_DIR:-/dev/shm}/gust-soak-ref.$$
bench_scratch "$base"
# shellcheck disable=SC2016 # evaluated on exit
bench_on_exit '[ -z "${churn:-}" ] || kill "$churn" 2>/dev/null'
mkdir -p "$base/local"
bench_start "$GUST" "$daemons" "$base/fs"
eval "$("$GUST" env --rootdir "$base/fs")"
"$GUST_PYTHON" bench/loader.py make --files "$files" --local "$base/local" --gust /loader
"$GUST_PYTHON" bench/churn.py "${CHURN_SECONDS:-60}" &
churn=$!
for r in $(seq "${READS:-4}"); do
  "$GUST_PYTHON" bench/loader.py read --target gust:/loader --manifest-dir "$base/local" \
    --workers 3 --epochs 2 --api read_many --batch 32 --verify >/dev/null
  echo "read $r: $((2 * files)) files, every crc32 checked"
done
wait "$churn"
churn=
flushes=$(cat "$base"/fs/d*/metadata/LOG | grep -c "flush table" || true)
echo "soak passed: ${READS:-4} verified reads under churn; $flushes table flushes in the daemons' RocksDB logs"
