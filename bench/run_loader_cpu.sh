#!/usr/bin/env bash
# CPU time per file of the data-loader workload (bench/loader.py), which is what
# bounds it on a machine whose cores the workers and daemons share: one worker
# reads every file of the data set whole, in random order, for 2 epochs; the CPU
# time of the reading process and of all daemons, per file, for
#   module      gustfs.open, data set made by this build (files <= 256 KiB inline)
#   module-16k  the same on a copy made with GUST_INLINE_BYTES_MAX=16384 (files over
#               16 KiB in chunks, the layout before the bound was raised)
#   local       Python's own open on the local copy (tmpfs)
# and the daemon requests per file. Stable where wall-clock rates are not (a busy
# machine stretches wall time, much less CPU time). Ways interleaved run by run;
# medians of RUNS runs. Usage: bench/run_loader_cpu.sh [runs]  (BENCH_FILES, 3000;
# BENCH_DAEMONS, 4). JSON lines in bench/results/loader-cpu-<date>.json.
set -euo pipefail
# shellcheck source=lib.sh
. "$(dirname "$0")/lib.sh"
cd "$BENCH_ROOT"
bench_build --workspace --all-targets
bench_python_env
runs=${1:-3}
files=${BENCH_FILES:-3000}
daemons=${BENCH_DAEMONS:-4}
base=${BENCH_DIR:-/dev/shm}/gust-loader-cpu.$$
bench_scratch "$base"
mkdir -p "$base/local"
out=$(bench_result loader-cpu)
bench_start "$GUST" "$daemons" "$base/fs"
eval "$("$GUST" env --rootdir "$base/fs")"
"$GUST_PYTHON" bench/loader.py make --files "$files" --local "$base/local" --gust /loader
GUST_INLINE_BYTES_MAX=16384 "$GUST_PYTHON" bench/loader.py make --files "$files" --local "$base/local" --gust /loader-16k --gust-only
dpids=$(bench_daemon_pids "$GUST_HOSTS_FILE" | tr '\n' ' ')
: > "$out"
for r in $(seq "$runs"); do
  for w in $(bench_rotate "$r" module module-16k local); do
    case $w in
      module) t=gust:/loader ;;
      module-16k) t=gust:/loader-16k ;;
      local) t=posix:$base/local ;;
    esac
    BENCH_PYTHON=$GUST_PYTHON bench_py - "$t" "$base/local" "$files" "$GUST" "$GUST_HOSTS_FILE" "$dpids" "$w" "$r" >> "$out" <<'PY'
import json, resource, subprocess, sys
from stats import gust_requests, proc_cpu_seconds
t, manifest, files, gust, hosts, dpids, way, run = sys.argv[1:9]
n = int(files) * 2
q0, d0 = gust_requests(gust, hosts), proc_cpu_seconds(dpids.split())
r = subprocess.run([sys.executable, "bench/loader.py", "read", "--target", t, "--manifest-dir", manifest,
                    "--workers", "1", "--epochs", "2"], capture_output=True, text=True, check=True)
d1 = proc_cpu_seconds(dpids.split())
q1 = gust_requests(gust, hosts) - len(dpids.split())  # less the stats requests of the first status
c = resource.getrusage(resource.RUSAGE_CHILDREN)
res = json.loads(r.stdout)
print(json.dumps({"run": int(run), "way": way, "files": n, "client_cpu_us_per_file": 1e6 * (c.ru_utime + c.ru_stime) / n,
                  "daemon_cpu_us_per_file": 1e6 * (d1 - d0) / n, "requests_per_file": (q1 - q0) / n,
                  "files_per_s": res["files_per_s"]}))
PY
  done
done
bench_py - "$out" <<'PY'
import sys
from stats import median, read_jsonl
rows = read_jsonl(sys.argv[1])
med = lambda way, k: median(r[k] for r in rows if r["way"] == way)
total = {w: median(r["client_cpu_us_per_file"] + r["daemon_cpu_us_per_file"] for r in rows if r["way"] == w)
         for w in ("module", "module-16k", "local")}
print(f"{rows[0]['files']} file reads per run (1 worker, 2 epochs), medians of {len({r['run'] for r in rows})} runs")
print("| way | requests/file | client CPU µs/file | daemons CPU µs/file | total CPU µs/file | local/way (CPU) | files/s (wall, noisy) |")
print("|---|---:|---:|---:|---:|---:|---:|")
for w in ("module", "module-16k", "local"):
    print(f"| {w} | {med(w, 'requests_per_file'):.2f} | {med(w, 'client_cpu_us_per_file'):.0f} | {med(w, 'daemon_cpu_us_per_file'):.0f} "
          f"| {total[w]:.0f} | {total['local'] / total[w]:.2f} | {med(w, 'files_per_s'):,.0f} |")
print(f"results: {sys.argv[1]}", file=sys.stderr)
PY
