#!/usr/bin/env bash
# Start-up time of `gust start --hosts` over ssh for 1, 2, 4 and 8 test nodes
# (tests/cluster/testcluster.sh: network, UTS and mount namespaces on this machine),
# against the floor of the same fan-out: one `ssh HOST true` per host, in parallel.
# Needs root. Usage: bench/start_hosts.sh [runs]   (median of `runs`, default 5)
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/env.sh
runs=${1:-5}
dir=/var/tmp/gust-bench-start-$$
tc=tests/cluster/testcluster.sh
trap 'bash $tc down $dir; rm -rf $dir' EXIT
bash $tc up $dir 21 8 >/dev/null
bash $tc sshd $dir >/dev/null
ssh="ssh -F $dir/ssh_config"
now() { date +%s.%N; }
median() { sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
printf '%-6s %12s %12s %8s\n' hosts "ssh floor s" "gust start s" ratio
for n in 1 2 4 8; do
  floor=(); start=()
  for ((r = 0; r < runs; r++)); do
    t0=$(now)
    for ((i = 0; i < n; i++)); do $ssh -o BatchMode=yes -T gnode$i true & done
    wait
    floor+=("$(echo "$(now) - $t0" | bc)")
    t0=$(now)
    "$GUST" start --hosts "gnode[0-$((n - 1))]" --ssh "$ssh" --rootdir /tmp/gust-bench >/dev/null 2>"$dir/start.err" \
      || { cat "$dir/start.err"; exit 1; }
    start+=("$(echo "$(now) - $t0" | bc)")
    "$GUST" stop --hosts-file /tmp/gust-bench/gust.hosts 2>/dev/null
  done
  f=$(printf '%s\n' "${floor[@]}" | median); s=$(printf '%s\n' "${start[@]}" | median)
  printf '%-6s %12.3f %12.3f %8.2f\n' "$n" "$f" "$s" "$(echo "$s / $f" | bc -l)"
done
