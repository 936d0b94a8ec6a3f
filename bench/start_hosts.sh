#!/usr/bin/env bash
# Start-up time of `gust start` for 1, 2, 4 and 8 test nodes (tests/cluster/
# testcluster.sh: network, UTS and mount namespaces on this machine), over ssh
# (`--hosts`) and through srun in a SLURM allocation, each against the floor of the
# same fan-out: `ssh HOST true` to every host in parallel, `srun -N n true`.
# Needs root. Usage: bench/start_hosts.sh [runs]   (median of `runs`, default 5)
set -euo pipefail
# shellcheck source=lib.sh
. "$(dirname "$0")/lib.sh"
cd "$BENCH_ROOT"
runs=${1:-5}
dir=/var/tmp/gust-bench-start-$$
tc=tests/cluster/testcluster.sh
# shellcheck disable=SC2016 # evaluated on exit
bench_on_exit 'bash "$tc" down "$dir"; rm -rf "$dir"'
bash $tc up $dir 21 8 >/dev/null
bash $tc sshd $dir >/dev/null
bash $tc slurm $dir >/dev/null
export SLURM_CONF=$dir/etc/slurm.conf
ssh="ssh -F $dir/ssh_config"
printf '%-6s %10s %10s %6s   %10s %10s %6s\n' hosts "ssh floor" "gust ssh" ratio "srun floor" "gust srun" ratio
for n in 1 2 4 8; do
  floor=(); start=(); sfloor=(); sstart=()
  for ((r = 0; r < runs; r++)); do
    t0=$(bench_now)
    for ((i = 0; i < n; i++)); do $ssh -o BatchMode=yes -T gnode$i true & done
    wait
    floor+=("$(bench_elapsed "$t0")")
    t0=$(bench_now)
    "$GUST" start --hosts "gnode[0-$((n - 1))]" --ssh "$ssh" --rootdir /tmp/gust-bench >/dev/null 2>"$dir/start.err" \
      || { cat "$dir/start.err"; exit 1; }
    start+=("$(bench_elapsed "$t0")")
    "$GUST" stop --hosts-file /tmp/gust-bench/gust.hosts 2>/dev/null
    # In an allocation of n nodes (salloc runs the launcher here, as from a login node).
    read -r sf ss < <(salloc -Q -N "$n" bash -c '
      now() { date +%s.%N; }
      t0=$(now); srun -N "$SLURM_JOB_NUM_NODES" -n "$SLURM_JOB_NUM_NODES" --overlap true; t1=$(now)
      "'"$GUST"'" start --rootdir /tmp/gust-bench-srun >/dev/null 2>'"$dir"'/srun-start.err \
        || { cat '"$dir"'/srun-start.err >&2; exit 1; }
      t2=$(now)
      "'"$GUST"'" stop --hosts-file /tmp/gust-bench-srun/gust.hosts 2>/dev/null
      echo "$(echo "$t1 - $t0" | bc) $(echo "$t2 - $t1" | bc)"')
    sfloor+=("$sf"); sstart+=("$ss")
  done
  f=$(bench_stats median "${floor[@]}"); s=$(bench_stats median "${start[@]}")
  sf=$(bench_stats median "${sfloor[@]}"); ss=$(bench_stats median "${sstart[@]}")
  printf '%-6s %10.3f %10.3f %6.2f   %10.3f %10.3f %6.2f\n' "$n" "$f" "$s" "$(bench_div "$s" "$f")" \
    "$sf" "$ss" "$(bench_div "$ss" "$sf")"
done
