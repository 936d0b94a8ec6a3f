#!/usr/bin/env bash
# Staging (issue 10): a data set of many small files and a few large ones, staged in
# and out of a 4-daemon instance by the daemons (`gust stage`, the new path), through
# the client (`gust stage --via client`, the previous path), by `cp -r` through the
# preload library (`gust run -- cp -r`), against local `cp -r` (tmpfs to tmpfs), all
# in the same round. Also the read record (a job that reads 10% of a 10,000-file set;
# the next run stages from its record) and --follow's cost to a writing job.
# Usage: bench/run_stage.sh [rounds]   (JSON lines in bench/results/stage-<date>.json,
# a markdown table of medians on stdout).
# Size: STAGE_SMALL files of 4 KiB (100000) and STAGE_BIG files of STAGE_BIG_MIB MiB
# (4 x 1024), on BENCH_DIR (default /dev/shm: tmpfs, so the copy itself is measured,
# not a disk; the source, GustFS's chunks and one destination are there at once).
set -euo pipefail
# shellcheck source=lib.sh
. "$(dirname "$0")/lib.sh"
cd "$BENCH_ROOT"
rounds=${1:-3}
small=${STAGE_SMALL:-100000}
big=${STAGE_BIG:-4}
big_mib=${STAGE_BIG_MIB:-1024}
base=${BENCH_DIR:-/dev/shm}/gust-stage.$$
bench_scratch "$base"
mkdir -p "$base"
out=$(bench_result stage)
: > "$out"
export GUST_HOSTS_FILE=$base/root/gust.hosts

echo "making the data set: $small x 4 KiB, $big x $big_mib MiB" >&2
python3 - "$base/src" "$small" "$big" "$big_mib" <<'PY'
import os, sys
root, small, big, big_mib = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
block = os.urandom(4096)
for i in range(small):
    d = os.path.join(root, "small", f"{i // 1000:03d}")
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, f"f{i:06d}"), "wb") as f:
        f.write(block[i % 4096:] + block[:i % 4096])
os.makedirs(os.path.join(root, "big"), exist_ok=True)
chunk = os.urandom(1 << 20)
for i in range(big):
    with open(os.path.join(root, "big", f"b{i}"), "wb") as f:
        for _ in range(big_mib):
            f.write(chunk)
PY

# Seconds taken by a command (wall clock).
secs() { bench_time "$@" 2>/dev/null; }
fresh() { bench_stop "$GUST" "$base/root" 2>/dev/null || true; bench_start "$GUST" 4 "$base/root"; }
record() { bench_stats record "$out" round:="$1" what="$2" part="$3" seconds:="$4"; }

for r in $(seq 1 "$rounds"); do
  for part in small big; do
    # Local cp -r, tmpfs to tmpfs: the baseline.
    record "$r" "local cp -r" "$part" "$(secs cp -r "$base/src/$part" "$base/local")"
    rm -rf "$base/local"
    # The daemons: in, then out.
    fresh
    record "$r" "stage in (daemons)" "$part" "$(secs "$GUST" stage in "$base/src/$part" /d --via daemons -j 2)"
    record "$r" "stage out (daemons)" "$part" "$(secs "$GUST" stage out /d "$base/out" --via daemons -j 2)"
    rm -rf "$base/out"
    # Through the client: the previous path.
    fresh
    record "$r" "stage in (client)" "$part" "$(secs "$GUST" stage in "$base/src/$part" /d --via client -j 4)"
    record "$r" "stage out (client)" "$part" "$(secs "$GUST" stage out /d "$base/out" --via client -j 4)"
    rm -rf "$base/out"
    # cp -r through the preload library.
    fresh
    record "$r" "gust run -- cp -r in" "$part" "$(secs "$GUST" run -- cp -r "$base/src/$part" /gustfs/d)"
    record "$r" "gust run -- cp -r out" "$part" "$(secs "$GUST" run -- cp -r /gustfs/d "$base/out")"
    rm -rf "$base/out"
  done
  echo "round $r done" >&2
done
bench_stop "$GUST" "$base/root" || true

bench_py - "$out" <<'PY'
import sys
from stats import paired, median, read_jsonl
rows = {}
for r in read_jsonl(sys.argv[1]):
    rows.setdefault((r["part"], r["what"]), []).append(r["seconds"])
print("| data | how | seconds (median) | local cp -r / this (same rounds) | per round (s) |")
print("|---|---|---:|---:|---|")
for part in ("small", "big"):
    local = rows[(part, "local cp -r")]
    for (p, what), xs in rows.items():
        if p != part:
            continue
        ratio = paired(local, xs).median
        print(f"| {part} | {what} | {median(xs):.2f} | {ratio:.2f} | {' '.join(f'{x:.2f}' for x in xs)} |")
PY
