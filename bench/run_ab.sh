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
old=$1 new=$2 rounds=${3:-16}
out=${OUT:-$(mktemp -d /tmp/gust-ab.XXXXXX)}
mkdir -p "$out"
root=${BENCH_DIR:-/dev/shm}/gust-ab.$$
declare -A bin=([old]=$old [new]=$new)
for run in $(seq 1 "$rounds"); do
  for kind in md io; do
    if (( run % 2 )); then order="old new"; else order="new old"; fi
    for v in $order; do
      g=${bin[$v]}
      "$g" start --local 4 --rootdir "$root-$v" >/dev/null
      if [ "$kind" = md ]; then
        "$g" bench md -n "${BENCH_FILES:-10000}" -p 2 --rootdir "$root-$v" --json >"$out/$kind-$v-$run.json"
      else
        "$g" bench io -p 2 -b "${BENCH_BLOCK:-256MiB}" --rootdir "$root-$v" --json >"$out/$kind-$v-$run.json"
      fi
      "$g" stop --rootdir "$root-$v" >/dev/null 2>&1
    done
  done
done
python3 - "$out" <<'PY'
import glob, json, math, re, statistics, sys
rows = {}
for f in glob.glob(sys.argv[1] + "/*.json"):
    kind, v, run = re.match(r".*/(md|io)-(old|new)-(\d+)\.json", f).groups()
    j = json.load(open(f))
    for p in j["phases"]:
        rows.setdefault((kind, p["phase"], j["unit"]), {}).setdefault(v, {})[int(run)] = p["gust"]["median_rate"]
for (kind, phase, unit), vs in sorted(rows.items()):
    runs = sorted(vs["old"])
    o = [vs["old"][r] for r in runs]
    n = [vs["new"][r] for r in runs]
    lr = [math.log(a / b) for a, b in zip(n, o)]
    gm = statistics.mean(lr)
    se = statistics.stdev(lr) / math.sqrt(len(lr)) if len(lr) > 1 else 0.0
    print(f"{kind} {phase:7} ({unit}): old {statistics.median(o):10,.0f}  new {statistics.median(n):10,.0f}  "
          f"new/old {statistics.median(n) / statistics.median(o):.2f}  paired {math.exp(gm):.2f} "
          f"({math.exp(gm - 2 * se):.2f}-{math.exp(gm + 2 * se):.2f})")
print(f"raw results: {sys.argv[1]}")
PY
