#!/usr/bin/env bash
# FUSE creates (issue 14 part 4): `gust bench md` through the mount, 4 daemons, one
# directory per process (made through the mount, as mdtest, tar and cp -r do), for
#   prev        the previous build's `gust mount` (BASE_BIN, default ~/.cache/gust-prev)
#   default     this build's mount, default options (no negative entries)
#   negative    this build's mount with --negative-timeout 1
# against the same daemons, mounts interleaved run by run (one `gust bench --runs 1`
# per mount per run); medians of RUNS runs per phase.
# Usage: bench/run_fuse_create.sh [runs]   (BENCH_FILES per process, default 5000;
# BENCH_PROCS, default "1 4"). JSON lines in bench/results/fuse-create-<date>.json.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/env.sh
cargo build --release --workspace --all-targets >/dev/null
runs=${1:-3}
files=${BENCH_FILES:-5000}
procs=${BENCH_PROCS:-"1 4"}
prev=${BASE_BIN:-$HOME/.cache/gust-prev}/gust
[ -x "$prev" ] || { echo "no previous build at $prev (set BASE_BIN)" >&2; exit 1; }
base=${BENCH_DIR:-/dev/shm}/gust-fuse-create.$$
mnt=$base/mnt
mkdir -p "$mnt" bench/results
out=bench/results/fuse-create-$(date +%Y%m%d-%H%M).json
cleanup() {
  "$GUST" umount "$mnt" >/dev/null 2>&1 || "$GUST" umount --lazy "$mnt" >/dev/null 2>&1 || true
  "$GUST" stop --rootdir "$base/fs" >/dev/null 2>&1 || true
  rm -rf "$base"
}
trap cleanup EXIT
"$GUST" start --local 4 --rootdir "$base/fs" >/dev/null
export GUST_HOSTS_FILE="$base/fs/gust.hosts"
: > "$out"
mount_as() { # name
  case $1 in
    prev) "$prev" mount -d "$mnt" --hosts-file "$GUST_HOSTS_FILE" --log "$base/mount-prev.log" >/dev/null 2>&1 ;;
    default) "$GUST" mount -d "$mnt" --log "$base/mount-default.log" >/dev/null 2>&1 ;;
    negative) "$GUST" mount -d "$mnt" --negative-timeout 1 --log "$base/mount-negative.log" >/dev/null 2>&1 ;;
  esac
}
for r in $(seq "$runs"); do
  order=(prev default negative)
  order=("${order[@]:$((r % 3))}" "${order[@]:0:$((r % 3))}")
  for p in $procs; do
    for m in "${order[@]}"; do
      mount_as "$m"
      json=$("$GUST" bench md -n "$files" -p "$p" --target "posix:$mnt" --runs 1 --json)
      "$GUST" umount "$mnt"
      for _ in $(seq 1 100); do grep -q " $mnt " /proc/mounts || break; sleep 0.05; done
      printf '{"run": %d, "mount": "%s", "procs": %d, "result": %s}\n' "$r" "$m" "$p" "$json" | tr -d '\n' >> "$out"
      echo >> "$out"
    done
  done
done
python3 - "$out" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
def rate(r, phase):
    for ph in r["result"]["phases"]:
        if ph["phase"] == phase:
            t = [k for k in ph if k.startswith("posix:")][0]
            return ph[t]["median_rate"]
cell = {}
for r in rows:
    for ph in ("create", "stat", "read", "remove"):
        cell.setdefault((r["procs"], ph, r["mount"]), {})[r["run"]] = rate(r, ph)
print("| P | phase | prev (ops/s) | default | negative | default/prev | negative/prev |")
print("|---|---|---:|---:|---:|---:|---:|")
for p in sorted({r["procs"] for r in rows}):
    for ph in ("create", "stat", "read", "remove"):
        c = {m: cell[(p, ph, m)] for m in ("prev", "default", "negative")}
        med = {m: statistics.median(v.values()) for m, v in c.items()}
        ratio = lambda m: statistics.median(c[m][run] / c["prev"][run] for run in c["prev"])
        print(f"| {p} | {ph} | {med['prev']:,.0f} | {med['default']:,.0f} | {med['negative']:,.0f} | {ratio('default'):.2f} | {ratio('negative'):.2f} |")
print(f"results: {sys.argv[1]}", file=sys.stderr)
PY
