#!/usr/bin/env bash
# Issue 7's benchmarks: the cost of a write as a file grows, shared-file 8 KiB I/O,
# and `cp -r` of many small files through the preload library. Each measurement runs
# for this build and for a previous one (another build directory holding `gust` and
# libgust_preload.so) in the same run, interleaved, on a 4-daemon instance with
# root directories on /dev/shm (BENCH_DIR overrides).
#
# Usage: bench/run_writes.sh PREV_BIN_DIR [runs]
#   e.g. git worktree add /tmp/prev <commit> && (cd /tmp/prev && cargo build --release \
#        -p gust-cli -p gust-preload) && bench/run_writes.sh $CARGO_TARGET_DIR-prev/release 3
# Output: one line per measurement and version (medians of `runs`), and a JSON file
# in bench/results/writes-<date>.json.
set -euo pipefail
# shellcheck source=lib.sh
. "$(dirname "$0")/lib.sh"
cd "$BENCH_ROOT"
prev=${1:?usage: bench/run_writes.sh PREV_BIN_DIR [runs]}
runs=${2:-3}
bench_build -p gust-cli -p gust-preload
cur=$(dirname "$GUST")
base=${BENCH_DIR:-/dev/shm}/gust-writes.$$
bench_scratch "$base"
mkdir -p "$base"
out=$(bench_result writes)

# A tree of 10,000 files of 4 KiB in 100 directories to copy.
src="$base/src"
python3 - "$src" <<'PY'
import os, sys
root = sys.argv[1]
for d in range(100):
    os.makedirs(f"{root}/d{d}", exist_ok=True)
    for f in range(100):
        with open(f"{root}/d{d}/f{f}", "wb") as fh:
            fh.write(os.urandom(4096))
PY

# The issue's reproduction: writes/s and stat latency after n writes of 100 bytes.
growth_py='
import os, time, json
r = {}
for n in [10, 1000, 10000, 50000]:
    p = f"/gustfs/m{n}"; fd = os.open(p, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644)
    t = time.time()
    for i in range(n): os.pwrite(fd, b"x" * 100, i * 100)
    w = n / (time.time() - t); os.close(fd)
    t = time.time()
    for i in range(2000): os.stat(p)
    r[n] = {"writes_per_s": w, "stat_us": (time.time() - t) / 2000 * 1e6}
    os.unlink(p)
print(json.dumps(r))
'

start() { # bin
  bench_start "$1/gust" 4 "$base/fs" --mountdir /gustfs
  export GUST_HOSTS_FILE="$base/fs/gust.hosts"
}
stop() { bench_stop "$1/gust" "$base/fs"; }

echo "[" > "$out"
sep=""
for run in $(seq 1 "$runs"); do
  for ver in prev cur; do
    bin=$prev; [ $ver = cur ] && bin=$cur
    start "$bin"
    growth=$("$bin/gust" run -- python3 -c "$growth_py")
    shared=()
    for p in 1 2 4; do
      shared+=("$("$bin/gust" bench io --shared-file -p "$p" -b 16MiB -t 8KiB --json)")
    done
    md4k=$("$bin/gust" bench md -n 2000 --size 4096 -p 1 --json)
    t0=$(date +%s.%N)
    "$bin/gust" run -- cp -r "$src" /gustfs/copy
    t1=$(date +%s.%N)
    "$bin/gust" run -- diff -rq "$src" /gustfs/copy >/dev/null
    stop "$bin"
    rm -rf "$base/local-copy"
    t2=$(date +%s.%N)
    cp -r "$src" "$base/local-copy"
    t3=$(date +%s.%N)
    printf '%s{"run": %d, "version": "%s", "growth": %s, "shared_8k": [%s], "md_4k": %s, "cp_gust_t": [%s, %s], "cp_local_t": [%s, %s]}\n' \
      "$sep" "$run" "$ver" "$growth" "$(IFS=,; echo "${shared[*]}")" "$md4k" \
      "$t0" "$t1" "$t2" "$t3" >> "$out"
    sep=","
    echo "run $run $ver done" >&2
  done
done
echo "]" >> "$out"
bench_py - "$out" <<'PY'
import sys
from stats import median as med, read_json
rows = read_json(sys.argv[1])
def by(ver): return [r for r in rows if r["version"] == ver]
print("Writes of 100 B to one file through the preload library (medians)")
print(f"{'writes before':>14} {'prev writes/s':>14} {'cur writes/s':>13} {'prev stat':>10} {'cur stat':>9}")
for n in ["10", "1000", "10000", "50000"]:
    pw = med(r["growth"][n]["writes_per_s"] for r in by("prev")); cw = med(r["growth"][n]["writes_per_s"] for r in by("cur"))
    ps = med(r["growth"][n]["stat_us"] for r in by("prev")); cs = med(r["growth"][n]["stat_us"] for r in by("cur"))
    print(f"{n:>14} {pw:>14,.0f} {cw:>13,.0f} {ps:>8.0f}us {cs:>7.0f}us")
print()
print("Shared file, 8 KiB transfers, 16 MiB per process (MiB/s, medians)")
print(f"{'procs':>5} {'phase':>6} {'prev':>8} {'cur':>8} {'cur/prev':>9}")
for i, p in enumerate([1, 2, 4]):
    for ph in ["write", "read"]:
        def rate(ver):
            return med(next(x["gust"]["median_rate"] for x in r["shared_8k"][i]["phases"] if x["phase"] == ph) for r in by(ver))
        a, b = rate("prev"), rate("cur")
        print(f"{p:>5} {ph:>6} {a:>8.1f} {b:>8.1f} {b / a:>9.2f}")
print()
for ver in ["prev", "cur"]:
    cp = med(r["cp_gust_t"][1] - r["cp_gust_t"][0] for r in by(ver))
    lo = med(r["cp_local_t"][1] - r["cp_local_t"][0] for r in by(ver))
    cr = med(next(x["gust"]["median_rate"] for x in r["md_4k"]["phases"] if x["phase"] == "create") for r in by(ver))
    print(f"{ver}: cp -r of 10,000 x 4 KiB: {cp:.2f} s ({10000 / cp:,.0f} files/s), local cp -r {lo:.2f} s "
          f"(GustFS/local time {cp / lo:.1f}x); bench md --size 4096 creates {cr:,.0f}/s per process")
PY
echo "results: $out" >&2
