#!/usr/bin/env bash
# The data loader (bench/loader.py), this build against a previous one, same run:
# CPU time per file (the reading processes and all daemons), requests per file and
# files/s, for
#   base-open    previous build, `with gustfs.open(p, "rb") as f: f.read()`
#   new-open     this build, the same code
#   base-bytes   previous build, gustfs.read_bytes(p)
#   new-bytes    this build, gustfs.read_bytes(p)
#   base-batch   previous build, gustfs.read_many per batch of BENCH_BATCH files
#   new-batch    this build, the same code
#   local-open   Python's own open on the local copy (tmpfs)
#   local-bytes  pathlib.Path(p).read_bytes() on the local copy
# Each build runs its own instance (BENCH_DAEMONS daemons, its own data set made by
# its own module; protocol versions may differ) and its own Python environment
# (BASE_PYENV: a virtual environment with the previous build's gustfs installed;
# BASE_BIN: a directory with the previous build's `gust`). Ways rotate their order
# round by round; medians of ROUNDS rounds.
# Usage: BASE_BIN=DIR BASE_PYENV=DIR bench/run_loader_ab.sh [rounds]
#   BENCH_FILES (3000), BENCH_WORKERS (1), BENCH_EPOCHS (2), BENCH_DAEMONS (4),
#   BENCH_BATCH (32), AB_WAYS (the ways to run; default all eight)
# JSON lines in bench/results/loader-ab-<date>.json, a markdown table on stdout.
set -euo pipefail
# shellcheck source=lib.sh
. "$(dirname "$0")/lib.sh"
cd "$BENCH_ROOT"
bench_python_env
rounds=${1:-5}
files=${BENCH_FILES:-3000}
workers=${BENCH_WORKERS:-1}
epochs=${BENCH_EPOCHS:-2}
daemons=${BENCH_DAEMONS:-4}
batch=${BENCH_BATCH:-32}
read -r -a ways <<< "${AB_WAYS:-base-open new-open base-bytes new-bytes base-batch new-batch local-open local-bytes}"
base_bin=${BASE_BIN:?set BASE_BIN to a directory holding the previous gust binary}
base_py=${BASE_PYENV:?set BASE_PYENV to a virtual environment where the previous gustfs is installed}/bin/python
base=${BENCH_DIR:-/dev/shm}/gust-loader-ab.$$
bench_scratch "$base"
mkdir -p "$base/local"
out=$(bench_result loader-ab "-w$workers.json")
bench_start "$base_bin/gust" "$daemons" "$base/old"
bench_start "$GUST" "$daemons" "$base/new"
GUST_HOSTS_FILE=$base/old/gust.hosts "$base_py" bench/loader.py make --files "$files" --local "$base/local" --gust /loader
GUST_HOSTS_FILE=$base/new/gust.hosts "$GUST_PYTHON" bench/loader.py make --files "$files" --local "$base/local" --gust /loader --gust-only
: > "$out"
for r in $(seq "$rounds"); do
  for w in $(bench_rotate "$r" "${ways[@]}"); do
    case $w in
      base-*) py=$base_py bin=$base_bin/gust root=$base/old t=gust:/loader ;;
      new-*) py=$GUST_PYTHON bin=$GUST root=$base/new t=gust:/loader ;;
      local-*) py=$GUST_PYTHON bin=$GUST root=$base/new t=posix:$base/local ;;
    esac
    case $w in *-open) api=open ;; *-batch) api=read_many ;; *) api=read_bytes ;; esac
    dpids=$(bench_daemon_pids "$root/gust.hosts" | tr '\n' ' ')
    GUST_HOSTS_FILE=$root/gust.hosts BENCH_PYTHON=$py bench_py - "$t" "$base/local" "$files" "$bin" "$dpids" "$w" "$r" "$api" \
      "$workers" "$epochs" "$batch" >> "$out" <<'PY'
import json, os, resource, subprocess, sys
from stats import gust_requests, proc_cpu_seconds
t, manifest, files, gust, dpids, way, run, api, workers, epochs, batch = sys.argv[1:12]
hosts = os.environ["GUST_HOSTS_FILE"]
n = int(files) * int(epochs)
q0, d0 = gust_requests(gust, hosts), proc_cpu_seconds(dpids.split())
r = subprocess.run([sys.executable, "bench/loader.py", "read", "--target", t, "--manifest-dir", manifest,
                    "--workers", workers, "--epochs", epochs, "--api", api, "--batch", batch], capture_output=True, text=True, check=True)
d1 = proc_cpu_seconds(dpids.split())
q1 = gust_requests(gust, hosts) - len(dpids.split())  # less the stats requests of the first status
c = resource.getrusage(resource.RUSAGE_CHILDREN)
res = json.loads(r.stdout)
local = way.startswith("local")
print(json.dumps({"run": int(run), "way": way, "files": n, "client_cpu_us_per_file": 1e6 * (c.ru_utime + c.ru_stime) / n,
                  "daemon_cpu_us_per_file": 0.0 if local else 1e6 * (d1 - d0) / n,
                  "requests_per_file": 0.0 if local else (q1 - q0) / n, "files_per_s": res["files_per_s"]}))
PY
  done
  echo "round $r done" >&2
done
bench_py - "$out" "${ways[*]}" <<'PY'
import sys
from stats import median, read_jsonl
rows = read_jsonl(sys.argv[1])
ways = sys.argv[2].split()
med = lambda way, k: median(r[k] for r in rows if r["way"] == way)
tot = lambda r: r["client_cpu_us_per_file"] + r["daemon_cpu_us_per_file"]
total = {w: median(tot(r) for r in rows if r["way"] == w) for w in ways}
runs = sorted({r["run"] for r in rows})
by = {(r["run"], r["way"]): r for r in rows}
def ratio(a, b, key):  # median over rounds of the same-round ratio
    return median(key(by[(x, a)]) / key(by[(x, b)]) for x in runs)
print(f"{rows[0]['files']} file reads per run, medians of {len(runs)} rounds")
print("| way | requests/file | client CPU µs/file | daemons CPU µs/file | total CPU µs/file | local-open/way (CPU) "
      "| files/s (wall) | way/local-open (wall, same round) |")
print("|---|---:|---:|---:|---:|---:|---:|---:|")
for w in ways:
    print(f"| {w} | {med(w, 'requests_per_file'):.2f} | {med(w, 'client_cpu_us_per_file'):.0f} "
          f"| {med(w, 'daemon_cpu_us_per_file'):.0f} | {total[w]:.0f} | {ratio('local-open', w, tot):.2f} "
          f"| {med(w, 'files_per_s'):,.0f} | {ratio(w, 'local-open', lambda r: r['files_per_s']):.2f} |")
for new, old in [("new-open", "base-open"), ("new-bytes", "base-open"), ("new-batch", "base-batch")]:
    if new in ways and old in ways:
        print(f"{new} / {old}, CPU per file (same round): {ratio(new, old, tot):.2f}")
print(f"results: {sys.argv[1]}", file=sys.stderr)
PY
