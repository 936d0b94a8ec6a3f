#!/usr/bin/env bash
# Instructions a daemon and a client execute for the metadata benchmark with
# tracepoints compiled out, compiled in and off, and on: counts the machine's load
# does not change (valgrind --tool=callgrind), the complement of
# bench/run_trace_cost.sh's CPU times. One daemon under callgrind serves
# `gust bench md -n FILES -p 1`, run itself (and its worker) under callgrind; "on" switches every
# tracepoint on in both (GUST_TRACE=all, gust daemon --trace all).
# Usage: NOTRACE_GUST=path/to/gust-with-tracepoints-compiled-out bench/run_trace_instructions.sh [files]
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/env.sh
files=${1:-2000}
: "${NOTRACE_GUST:=$HOME/.cache/gust-notrace/gust}"
work=${BENCH_DIR:-/dev/shm}/gust-trace-cg.$$
mkdir -p "$work"
trap 'rm -rf "$work"' EXIT
printf '%-8s %14s %14s %12s %12s\n' variant daemon-Ir client-Ir daemon/op client/op
for v in out off on; do
  g=$GUST
  [ "$v" = out ] && g=$NOTRACE_GUST
  r=$work/$v
  mkdir -p "$r"
  dargs=()
  envs=()
  if [ "$v" = on ]; then
    dargs=(--trace all --trace-dir "$r/trace")
    envs=(GUST_TRACE=all "GUST_TRACE_DIR=$r/trace")
  fi
  valgrind --tool=callgrind --callgrind-out-file="$r/daemon.cg" "$g" daemon --rootdir "$r/root" \
    --hosts-file "$r/gust.hosts" "${dargs[@]}" 2>"$r/daemon.log" &
  dpid=$!
  for _ in $(seq 1 600); do grep -q '^daemon' "$r/gust.hosts" 2>/dev/null && break; sleep 0.1; done
  env "${envs[@]}" valgrind --tool=callgrind --trace-children=yes --callgrind-out-file="$r/client.%p.cg" \
    "$g" bench md -n "$files" -p 1 --hosts-file "$r/gust.hosts" >/dev/null 2>"$r/client.log"
  kill -TERM "$dpid"
  wait "$dpid" || true
  d=$(callgrind_annotate "$r/daemon.cg" 2>/dev/null | awk '/PROGRAM TOTALS/ {gsub(",", "", $1); print $1}')
  c=0
  for f in "$r"/client.*.cg; do # the benchmark and its worker process
    c=$((c + $(callgrind_annotate "$f" 2>/dev/null | awk '/PROGRAM TOTALS/ {gsub(",", "", $1); print $1}')))
  done
  ops=$((files * 4))
  printf '%-8s %14s %14s %12.0f %12.0f\n' "$v" "$d" "$c" "$(echo "$d / $ops" | bc -l)" "$(echo "$c / $ops" | bc -l)"
done
