#!/usr/bin/env bash
# Growing and shrinking a running instance (docs/DESIGN.md, "Growing and shrinking";
# docs/PERFORMANCE.md, "Growing and shrinking"): 4 daemons, FILES files of 4 KiB and
# BIG files of 8 MiB, then `gust expand --local 4` and `gust shrink --count 4` while
# LOAD processes stat and read small files through the preload library. Each round on
# a fresh instance under BENCH_DIR (default /dev/shm).
# RESIZE_PLACEMENT=capacity starts the instance with capacity placement (each daemon
# weighed by the free space it registers at start, the new ones too).
# Usage: bench/run_resize.sh [rounds] [files] [big] [load]   (defaults 3 100000 128 2)
# JSON lines in bench/results/resize-<date>.json; medians on stdout.
set -euo pipefail
# shellcheck source=lib.sh
. "$(dirname "$0")/lib.sh"
cd "$BENCH_ROOT"
rounds=${1:-3} files=${2:-100000} big=${3:-128} load=${4:-2}
base=${BENCH_DIR:-/dev/shm}/gust-resize.$$
bench_scratch "$base"
out=$(bench_result resize)
[ -x "$GUST" ] && [ -f "$BENCH_PRELOAD" ] || { echo "build first: cargo build --release --workspace" >&2; exit 1; }
: > "$out"
for r in $(seq 1 "$rounds"); do
  rm -rf "$base"
  bench_start "$GUST" 4 "$base" --placement "${RESIZE_PLACEMENT:-wide}"
  GUST_HOSTS_FILE="$base/gust.hosts" GUST_MOUNTDIR=/gustfs LD_PRELOAD="$BENCH_PRELOAD" \
    python3 bench/resize.py "$files" "$big" 4 "$load" "$out" >> "$out"
  echo "round $r: $(tail -1 "$out" | python3 -c 'import json,sys; d=json.load(sys.stdin); e, s = d["expand"]["seconds"], d["shrink"]["seconds"]; print(f"expand {e:.1f} s, shrink {s:.1f} s")')" >&2
  bench_stop "$GUST" "$base"
done
bench_py - "$out" <<'PY'
import sys
from stats import median, read_jsonl
rows = read_jsonl(sys.argv[1])
m = lambda f: median(f(r) for r in rows)
print(f"| measure ({len(rows)} runs, median) | expand 4 -> 8 | shrink 8 -> 4 |")
print("| --- | --- | --- |")
print(f"| records moved (ideal {rows[0]['ideal_fraction']:.3f}) | {m(lambda r: r['expand_records_fraction']):.3f} | {m(lambda r: r['shrink_records_fraction']):.3f} |")
print(f"| chunk bytes moved (ideal {rows[0].get('ideal_chunks_fraction', rows[0]['ideal_fraction']):.3f}) | {m(lambda r: r['expand_bytes_fraction']):.3f} | {m(lambda r: r['shrink_bytes_fraction']):.3f} |")
print(f"| bytes moved | {m(lambda r: r['expand']['bytes_moved'])/2**20:.0f} MiB | {m(lambda r: r['shrink']['bytes_moved'])/2**20:.0f} MiB |")
print(f"| time | {m(lambda r: r['expand']['seconds']):.2f} s | {m(lambda r: r['shrink']['seconds']):.2f} s |")
g = lambda k: (lambda r: r[k].get('first_pass_seconds', 0.0))
h = lambda k: (lambda r: r[k].get('held_seconds', r[k]['seconds']))
print(f"| of which the first pass (clients served) | {m(g('expand')):.2f} s | {m(g('shrink')):.2f} s |")
print(f"| of which clients held off (prepare to adopt) | {m(h('expand')):.2f} s | {m(h('shrink')):.2f} s |")
b = m(lambda r: r['ops_per_s_before'])
print(f"| clients' ops/s during, of before ({b:,.0f}/s) | {m(lambda r: r['ops_per_s_during_expand'])/b:.2f} | {m(lambda r: r['ops_per_s_during_shrink'])/b:.2f} |")
print(f"| clients' ops/s after, of before | {m(lambda r: r['ops_per_s_between'])/b:.2f} | {m(lambda r: r['ops_per_s_after'])/b:.2f} |")
PY
