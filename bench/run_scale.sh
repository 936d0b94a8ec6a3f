#!/usr/bin/env bash
# How a GustFS instance grows (docs/PERFORMANCE.md, "How it grows"): 1, 2, 4 and 8
# test hosts (tests/cluster/testcluster.sh: a network, UTS and mount namespace
# each, own address, own /tmp), one daemon per host started over ssh, and on every
# host at once P client processes (`gust bench md -n FILES -p P --target gust`:
# create, stat, read, remove of FILES 0-byte files each). While they run, every
# daemon is sampled every 0.2 s from /proc: connections (its socket descriptors
# less its 3 listeners: TCP, Unix socket, shared-memory rendezvous), threads, RSS.
# Requests are the daemons' own counters (`gust status` totals) before and after.
# Needs root. Usage: bench/run_scale.sh ["P1 P2 ..."] [files]
# Output: a markdown table on stdout, JSON lines in bench/results/scale-<date>.json.
set -euo pipefail
# shellcheck source=lib.sh
. "$(dirname "$0")/lib.sh"
cd "$BENCH_ROOT"
procs=${1:-1 4} files=${2:-4000}
dir=/var/tmp/gust-bench-scale-$$
tc=tests/cluster/testcluster.sh
out=$PWD/$(bench_result scale)
root=/tmp/gust-scale
hosts=$root/gust.hosts
# shellcheck disable=SC2016 # evaluated on exit
bench_on_exit '[ -z "${sampler:-}" ] || kill "$sampler" 2>/dev/null
  "$GUST" stop --hosts-file "$hosts" >/dev/null 2>&1 || true; bash "$tc" down "$dir" >/dev/null 2>&1; rm -rf "$dir"'
bash $tc up $dir 23 8 >/dev/null
bash $tc sshd $dir >/dev/null
ssh="ssh -F $dir/ssh_config"
total_requests() { "$GUST" status --hosts-file "$hosts" | awk '$1 ~ /^[0-9]+$/ && $5 == "up" {t += $6} END {print t}'; }
sample() { # pid -> "connections threads rss_kib"
  local s t r
  s=$(find "/proc/$1/fd" -lname 'socket:*' 2>/dev/null | wc -l)
  t=$(awk '/^Threads:/ {print $2}' "/proc/$1/status")
  r=$(awk '/^VmRSS:/ {print $2}' "/proc/$1/status")
  echo "$((s - 3)) $t $r"
}
: >"$out"
for n in 1 2 4 8; do
  "$GUST" start --hosts "gnode[0-$((n - 1))]" --ssh "$ssh" --rootdir "$root" >/dev/null
  mapfile -t pids < <(bench_daemon_pids "$hosts")
  for p in $procs; do
    idle=$(for d in "${pids[@]}"; do sample "$d"; done | tr '\n' ';')
    r0=$(total_requests)
    stop=$dir/stop-sampling
    rm -f "$stop"
    (
      declare -A peak_c peak_t peak_r
      while [ ! -e "$stop" ]; do
        for d in "${pids[@]}"; do
          read -r c t r < <(sample "$d")
          ((c > ${peak_c[$d]:-0})) && peak_c[$d]=$c
          ((t > ${peak_t[$d]:-0})) && peak_t[$d]=$t
          ((r > ${peak_r[$d]:-0})) && peak_r[$d]=$r
        done
        sleep 0.2
      done
      for d in "${pids[@]}"; do echo "${peak_c[$d]:-0} ${peak_t[$d]:-0} ${peak_r[$d]:-0}"; done >"$dir/peaks"
    ) &
    sampler=$!
    t0=$(bench_now)
    for ((i = 0; i < n; i++)); do
      bash $tc exec $dir "$i" "$GUST" bench md -n "$files" -p "$p" --target gust --hosts-file "$hosts" --json \
        >"$dir/bench$i.json" &
    done
    wait $(jobs -p | grep -v "^$sampler$")
    seconds=$(bench_elapsed "$t0")
    touch "$stop"
    wait "$sampler"
    sampler=
    r1=$(total_requests)
    rates=$(for ((i = 0; i < n; i++)); do bench_stats rates --target gust --format '{phase}:{rate:.0f}' --sep , <"$dir/bench$i.json"; done | tr '\n' ';')
    printf '{"hosts": %d, "procs": %d, "files": %d, "ops": %d, "requests": %d, "seconds": %s, "idle": "%s", "peaks": "%s", "rates": "%s"}\n' \
      "$n" "$p" "$files" $((n * p * files * 4)) $((r1 - r0)) "$(printf '%.3f' "$seconds")" "$idle" \
      "$(tr '\n' ';' <"$dir/peaks")" "$rates" >>"$out"
  done
  "$GUST" stop --hosts-file "$hosts" >/dev/null
done
bench_py - "$out" <<'PY'
import json, sys
from stats import median
print("| hosts N | procs/host P | connections/daemon (max, model N·(P+1)) | threads/daemon idle → peak (model 15, + P+1 with GUST_TRANSPORT=shm) | RSS/daemon idle → peak (MiB) | requests/op (model 1 + 1/files) | creates/s per host |")
print("|---:|---:|---|---|---|---:|---:|")
for line in open(sys.argv[1]):
    r = json.loads(line)
    n, p = r["hosts"], r["procs"]
    idle = [list(map(int, x.split())) for x in r["idle"].split(";") if x]
    peaks = [list(map(int, x.split())) for x in r["peaks"].split(";") if x]
    creates = [float(kv.split(":")[1]) for host in r["rates"].split(";") if host for kv in host.split(",") if kv.startswith("create:")]
    print(f"| {n} | {p} | {max(x[0] for x in peaks)} ({n * (p + 1)}) | {median(x[1] for x in idle):.0f} → {max(x[1] for x in peaks)} "
          f"| {median(x[2] for x in idle) / 1024:.0f} → {max(x[2] for x in peaks) / 1024:.0f} | {r['requests'] / r['ops']:.3f} "
          f"| {median(creates):,.0f} |")
print(f"raw: {sys.argv[1]}", file=sys.stderr)
PY
