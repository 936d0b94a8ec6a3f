#!/usr/bin/env bash
# FUSE creates (issue 14 part 4): a process makes a directory through the mount (as
# mdtest, tar and cp -r do) and creates N empty files in it (O_CREAT|O_EXCL), then
# opens each once read-only; three mounts, each over its own 4-daemon instance:
#   prev        the previous build's `gust start` and `gust mount` (BASE_BIN, default
#               ~/.cache/gust-prev)
#   default     this build, default mount options (no negative entries)
#   negative    this build, `gust mount --negative-timeout 1`
# Reported per create: daemon requests (from `gust status`), CPU time of the caller,
# the mount process and the daemons together (stable on a busy machine), and the
# wall-clock rate (noisy on a busy machine). Mounts interleaved run by run; medians
# of RUNS runs. Usage: bench/run_fuse_create.sh [runs]  (BENCH_FILES, default 3000).
# JSON lines in bench/results/fuse-create-<date>.json, a table on stdout.
set -euo pipefail
# shellcheck source=lib.sh
. "$(dirname "$0")/lib.sh"
cd "$BENCH_ROOT"
bench_build --workspace --all-targets
runs=${1:-3}
files=${BENCH_FILES:-3000}
prev=${BASE_BIN:-$HOME/.cache/gust-prev}/gust
[ -x "$prev" ] || { echo "no previous build at $prev (set BASE_BIN)" >&2; exit 1; }
base=${BENCH_DIR:-/dev/shm}/gust-fuse-create.$$
bench_scratch "$base"
out=$(bench_result fuse-create)
bin_of() { if [ "$1" = prev ]; then echo "$prev"; else echo "$GUST"; fi; }
for m in prev default negative; do
  mkdir -p "$base/$m/mnt"
  bench_start "$(bin_of "$m")" 4 "$base/$m/fs"
done
: > "$out"
for r in $(seq "$runs"); do
  for m in $(bench_rotate "$r" prev default negative); do
    g=$(bin_of "$m")
    opts=()
    [ "$m" = negative ] && opts=(--negative-timeout 1)
    bench_mount "$g" "$base/$m/mnt" --hosts-file "$base/$m/fs/gust.hosts" "${opts[@]}" --log "$base/$m/mount.log"
    mpid=$(pgrep -f "gust mount.*$base/$m/mnt" | head -1)
    dpids=$(bench_daemon_pids "$base/$m/fs/gust.hosts" | tr '\n' ' ')
    json=$(bench_py - "$base/$m/mnt" "$files" "$g" "$base/$m/fs/gust.hosts" "$mpid" "$dpids" <<'PY'
import json, os, resource, sys, time
from stats import gust_requests, proc_cpu_seconds
mnt, n, gust, hosts, mpid, dpids = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5], sys.argv[6].split()
def others():
    return proc_cpu_seconds([mpid] + dpids)
def me():
    u = resource.getrusage(resource.RUSAGE_SELF)
    return u.ru_utime + u.ru_stime
d = f"{mnt}/d{time.time_ns()}"
os.mkdir(d)
res = {}
for phase in ("create", "open"):
    q0, c0, m0, t0 = gust_requests(gust, hosts), others(), me(), time.perf_counter()
    for i in range(n):
        if phase == "create":
            fd = os.open(f"{d}/f{i}", os.O_CREAT | os.O_WRONLY | os.O_EXCL, 0o644)
        else:
            fd = os.open(f"{d}/f{i}", os.O_RDONLY)
        os.close(fd)
    t1, m1, c1 = time.perf_counter(), me(), others()
    q1 = gust_requests(gust, hosts) - 4  # the status call of q0: one stats request per daemon
    res[phase] = {"requests_per_op": (q1 - q0) / n, "cpu_us_per_op": 1e6 * ((c1 - c0) + (m1 - m0)) / n, "ops_per_s": n / (t1 - t0)}
print(json.dumps(res))
PY
)
    bench_umount "$g" "$base/$m/mnt"
    bench_stats record "$out" run:="$r" mount="$m" files:="$files" result:="$json"
  done
done
bench_py - "$out" <<'PY'
import sys
from stats import median, read_jsonl
rows = read_jsonl(sys.argv[1])
print(f"{rows[0]['files']} files per run, medians of {len({r['run'] for r in rows})} runs")
print("| phase | mount | requests/op | CPU µs/op (caller + mount + daemons) | ops/s (wall, noisy) | CPU vs prev |")
print("|---|---|---:|---:|---:|---:|")
for ph in ("create", "open"):
    med = {}
    for m in ("prev", "default", "negative"):
        rs = [r["result"][ph] for r in rows if r["mount"] == m]
        med[m] = {k: median(x[k] for x in rs) for k in rs[0]}
    for m in ("prev", "default", "negative"):
        v = med[m]
        print(f"| {ph} | {m} | {v['requests_per_op']:.2f} | {v['cpu_us_per_op']:.0f} | {v['ops_per_s']:,.0f} | {v['cpu_us_per_op'] / med['prev']['cpu_us_per_op']:.2f} |")
print(f"results: {sys.argv[1]}", file=sys.stderr)
PY
