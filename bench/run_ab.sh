#!/usr/bin/env bash
# A/B comparison of two builds of `gust` (e.g. a change and the commit before it) on
# the md and io benchmarks, for "no performance change" claims on a noisy machine.
# Each round runs md then io for both builds, in ABBA order (the old build first in
# odd rounds, the new one first in even rounds: on a shared VM whichever runs first
# is measurably favoured), each run on a fresh 4-daemon instance on /dev/shm.
# Prints, per phase, the medians, their ratio and the geometric mean of the paired
# ratios with a 95% interval.
# Usage: bench/run_ab.sh OLD_GUST NEW_GUST [rounds]   (raw JSON in $OUT, default a temp dir)
set -euo pipefail
# shellcheck source=lib.sh
. "$(dirname "$0")/lib.sh"
old=$1 new=$2 rounds=${3:-16}
out=${OUT:-$(mktemp -d /tmp/gust-ab.XXXXXX)}
mkdir -p "$out"
root=${BENCH_DIR:-/dev/shm}/gust-ab.$$
bench_scratch "$root"
declare -A bin=([old]=$old [new]=$new)
for run in $(seq 1 "$rounds"); do
  for kind in md io; do
    for v in $(bench_abba "$run" old new); do
      g=${bin[$v]}
      bench_start "$g" 4 "$root/$v"
      if [ "$kind" = md ]; then
        "$g" bench md -n "${BENCH_FILES:-10000}" -p 2 --rootdir "$root/$v" --json >"$out/$kind-$v-$run.json"
      else
        "$g" bench io -p 2 -b "${BENCH_BLOCK:-256MiB}" --rootdir "$root/$v" --json >"$out/$kind-$v-$run.json"
      fi
      bench_stop "$g" "$root/$v"
    done
  done
done
bench_py - "$out" <<'PY'
import glob, re, sys
from stats import median, paired, read_json
rows = {}
for f in glob.glob(sys.argv[1] + "/*.json"):
    kind, v, run = re.match(r".*/(md|io)-(old|new)-(\d+)\.json", f).groups()
    j = read_json(f)
    for p in j["phases"]:
        rows.setdefault((kind, p["phase"], j["unit"]), {}).setdefault(v, {})[int(run)] = p["gust"]["median_rate"]
for (kind, phase, unit), vs in sorted(rows.items()):
    runs = sorted(vs["old"])
    o = [vs["old"][r] for r in runs]
    n = [vs["new"][r] for r in runs]
    p = paired(n, o)
    print(f"{kind} {phase:7} ({unit}): old {median(o):10,.0f}  new {median(n):10,.0f}  "
          f"new/old {median(n) / median(o):.2f}  paired {p.gm:.2f} ({p.lo:.2f}-{p.hi:.2f})")
print(f"raw results: {sys.argv[1]}")
PY
