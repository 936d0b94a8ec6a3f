#!/usr/bin/env bash
# Trace-guided stage-in (issue 10, part 4): a data set of STAGE_FILES files (10,000)
# of log-normal sizes around 64 KiB; a job reads a random 10% of them through the
# preload library (real cat). Run 1 stages everything in and records the reads
# (`gust stop --record-reads`); run 2 stages in from the record, then the same job
# runs: its reads must all succeed (no misses). Reports files and bytes staged and
# the times of both stage-ins, per round (goal: run 2 stages at least 5x less).
# Usage: bench/run_stage_record.sh [rounds]   (BENCH_DIR, default /dev/shm)
set -euo pipefail
# shellcheck source=lib.sh
. "$(dirname "$0")/lib.sh"
cd "$BENCH_ROOT"
rounds=${1:-3}
files=${STAGE_FILES:-10000}
base=${BENCH_DIR:-/dev/shm}/gust-record.$$
bench_scratch "$base"
mkdir -p "$base"
out=$(bench_result stage-record)
: > "$out"
python3 - "$base/set" "$files" <<'PY'
import os, random, sys
root, n = sys.argv[1], int(sys.argv[2])
rng = random.Random(1)
for i in range(n):
    d = os.path.join(root, f"{i // 500:02d}")
    os.makedirs(d, exist_ok=True)
    size = min(int(rng.lognormvariate(11.0, 0.8)), 4 << 20)  # median e^11 = 59 KiB
    with open(os.path.join(d, f"x{i:05d}"), "wb") as f:
        f.write(os.urandom(size))
PY
export GUST_HOSTS_FILE=$base/root/gust.hosts
for r in $(seq 1 "$rounds"); do
  # The job: a random 10% of the files (a new sample each round), read whole.
  (cd "$base/set" && find . -type f | sed 's|^\./|/gustfs/set/|' | shuf -n $((files / 10)) --random-source=<(yes "$r")) > "$base/job"
  bench_start "$GUST" 4 "$base/root"
  full=$("$GUST" stage in "$base/set" /set --json 2>/dev/null)
  xargs -a "$base/job" "$GUST" run -- cat > /dev/null
  bench_stop "$GUST" "$base/root" --record-reads "$base/reads.jsonl"
  bench_start "$GUST" 4 "$base/root"
  guided=$("$GUST" stage in "$base/set" /set --from-record "$base/reads.jsonl" --json 2>/dev/null)
  misses=0
  xargs -a "$base/job" "$GUST" run -- cat > /dev/null 2>"$base/misses" || misses=$(grep -c . "$base/misses" || true)
  bench_stop "$GUST" "$base/root"
  bench_stats record "$out" round:="$r" full:="$full" guided:="$guided" job_files:="$(wc -l < "$base/job")" misses:="$misses"
  echo "round $r done" >&2
done
bench_py - "$out" <<'PY'
import sys
from stats import read_jsonl
print("| round | full stage-in: files, MiB, s | from the record: files, MiB, s | bytes ratio | job reads | misses |")
print("|---|---|---|---:|---:|---:|")
for r in read_jsonl(sys.argv[1]):
    f, g = r["full"], r["guided"]
    print(f"| {r['round']} | {f['files']:,}, {f['bytes']/2**20:,.0f}, {f['seconds']:.2f} "
          f"| {g['files']:,}, {g['bytes']/2**20:,.0f}, {g['seconds']:.2f} "
          f"| {f['bytes']/max(g['bytes'],1):.1f}x | {r['job_files']:,} | {r['misses']} |")
PY
