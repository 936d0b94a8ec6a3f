#!/usr/bin/env bash
# The node proxy against direct connections (docs/PERFORMANCE.md, "The node proxy"):
# N test hosts (tests/cluster/testcluster.sh: network, UTS and mount namespace each),
# one daemon per host started over ssh; on every host at once P processes of
#   md: `gust bench md -n FILES -p P --target gust`  (create, stat, read, remove of
#       0-byte files)
#   io: `gust bench io -b BLOCK -t 4KiB -p P --target gust`  (4 KiB writes, then reads)
# with GUST_PROXY=0 (direct) and GUST_PROXY=1 (through this node's daemon), the two
# interleaved round by round. Per run: socket descriptors per daemon before and at
# the peak (less the 3 listeners, sampled every 0.2 s). A direct or local client
# connection is one descriptor; a daemon-to-daemon link of the proxy is two at each
# end (a reader's and a writer's handle), and links stay open between runs, so with
# the proxy connections = descriptors - 2·k·(N-1) (k links per pair). CPU time of the daemons (/proc/PID/stat) and
# of the client processes (the shell's `times` after the benchmark), and the
# benchmark's per-phase rates.
# Needs root. Usage: bench/run_proxy.sh [hosts] [procs] [rounds] [files] [block]
# Output: a table on stdout, JSON lines in bench/results/proxy-<date>.json.
set -euo pipefail
# shellcheck source=lib.sh
. "$(dirname "$0")/lib.sh"
cd "$BENCH_ROOT"
n=${1:-4} p=${2:-4} rounds=${3:-3} files=${4:-1000} block=${5:-1MiB}
dir=/var/tmp/gust-bench-proxy-$$
tc=tests/cluster/testcluster.sh
out=$PWD/$(bench_result proxy)
root=/tmp/gust-proxy-bench
hosts=$root/gust.hosts
# shellcheck disable=SC2016 # evaluated on exit
bench_on_exit '[ -z "${sampler:-}" ] || kill "$sampler" 2>/dev/null
  "$GUST" stop --hosts-file "$hosts" >/dev/null 2>&1 || true; bash "$tc" down "$dir" >/dev/null 2>&1; rm -rf "$dir"'
bash $tc up $dir 24 "$n" >/dev/null
bash $tc sshd $dir >/dev/null
ssh="ssh -F $dir/ssh_config"
mkdir -p "$dir/bin" && cp "$GUST" "$BENCH_PRELOAD" "$dir/bin/"
gust=$dir/bin/gust
"$gust" start --hosts "gnode[0-$((n - 1))]" --ssh "$ssh" --rootdir "$root" >/dev/null
mapfile -t pids < <(bench_daemon_pids "$hosts")
conns() { echo $(($(find "/proc/$1/fd" -lname 'socket:*' 2>/dev/null | wc -l) - 3)); }
: >"$out"
for ((r = 0; r < rounds; r++)); do
  for kind in md io; do
    for proxy in 0 1; do
      if [ "$kind" = md ]; then args=(md -n "$files"); else args=(io -b "$block" -t 4KiB); fi
      idle=$(for d in "${pids[@]}"; do conns "$d"; done | tr '\n' ' ')
      stop=$dir/stop; rm -f "$stop"
      (
        declare -A peak
        while [ ! -e "$stop" ]; do
          for d in "${pids[@]}"; do c=$(conns "$d"); ((c > ${peak[$d]:-0})) && peak[$d]=$c; done
          sleep 0.2
        done
        for d in "${pids[@]}"; do echo "${peak[$d]:-0}"; done >"$dir/peaks"
      ) &
      sampler=$!
      c0=$(bench_cpu_ticks "${pids[@]}")
      for ((i = 0; i < n; i++)); do
        bash $tc exec $dir "$i" bash -c "GUST_PROXY=$proxy $gust bench ${args[*]} -p $p --target gust --hosts-file $hosts --json >$dir/bench$i.json; times >$dir/times$i" &
      done
      wait $(jobs -p | grep -v "^$sampler$")
      c1=$(bench_cpu_ticks "${pids[@]}")
      touch "$stop"; wait "$sampler"; sampler=
      client=$(for ((i = 0; i < n; i++)); do sed -n 2p "$dir/times$i"; done | python3 -c '
import re, sys
t = 0.0
for line in sys.stdin:
    for m, s in re.findall(r"(\d+)m([\d.]+)s", line):
        t += int(m) * 60 + float(s)
print(round(t, 3))')
      rates=$(for ((i = 0; i < n; i++)); do bench_stats rates --target gust --format '{phase}:{rate:.1f}' --sep , <"$dir/bench$i.json"; done | tr '\n' ';')
      printf '{"round": %d, "kind": "%s", "proxy": %d, "hosts": %d, "procs": %d, "files": %s, "block": "%s", "daemon_cpu_s": %s, "client_cpu_s": %s, "idle": "%s", "peaks": "%s", "rates": "%s"}\n' \
        "$r" "$kind" "$proxy" "$n" "$p" "$files" "$block" "$(awk -v a="$c0" -v b="$c1" -v t="$BENCH_HZ" 'BEGIN {printf "%.3f", (b - a) / t}')" "$client" \
        "$idle" "$(tr '\n' ' ' <"$dir/peaks")" "$rates" >>"$out"
      tail -1 "$out" >&2
    done
  done
done
bench_py - "$out" "$block" <<'PY'
import sys
from stats import median, read_jsonl
rows = read_jsonl(sys.argv[1])
def parse_size(s):
    units = {"KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}
    for u, m in units.items():
        if s.endswith(u):
            return int(float(s[: -len(u)]) * m)
    return int(s)
print("| workload | path | socket descriptors/daemon before → peak (max) | rate, all hosts together (median of rounds) | CPU µs per op (daemons + clients), median |")
print("|---|---|---|---|---|")
for kind in ["md", "io"]:
    for proxy in [0, 1]:
        rs = [r for r in rows if r["kind"] == kind and r["proxy"] == proxy]
        if not rs:
            continue
        n, p = rs[0]["hosts"], rs[0]["procs"]
        idle = max(int(x) for r in rs for x in r.get("idle", "0").split())
        conns = f'{idle} → {max(int(x) for r in rs for x in r["peaks"].split())}'
        phases = {}
        for r in rs:
            tot = {}
            for host in r["rates"].split(";"):
                for kv in filter(None, host.split(",")):
                    k, v = kv.split(":")
                    tot[k] = tot.get(k, 0) + float(v)
            for k, v in tot.items():
                phases.setdefault(k, []).append(v)
        if kind == "md":
            ops = n * p * r["files"] * 4
        else:
            ops = n * p * (parse_size(sys.argv[2]) // 4096) * 2
        cpu = [(r["daemon_cpu_s"] + r["client_cpu_s"]) / ops * 1e6 for r in rs]
        rate = ", ".join(f"{k} {median(v):,.0f}" for k, v in phases.items())
        unit = "ops/s" if kind == "md" else "MiB/s"
        print(f"| {kind} | {'proxy' if proxy else 'direct'} | {conns} | {rate} {unit} | {median(cpu):.1f} |")
print(f"raw: {sys.argv[1]}", file=sys.stderr)
PY
