#!/usr/bin/env bash
# Instructions a daemon and a client execute for the metadata benchmark with
# tracepoints compiled out, compiled in and off, and on: counts the machine's load
# does not change (valgrind --tool=callgrind), the complement of
# bench/run_trace_cost.sh's CPU times. One daemon under callgrind serves
# `gust bench md -n FILES -p 1`, run itself (and its worker) under callgrind; "on" switches every
# tracepoint on in both (GUST_TRACE=all, gust daemon --trace all).
# Usage: NOTRACE_GUST=path/to/gust-with-tracepoints-compiled-out bench/run_trace_instructions.sh [files]
set -euo pipefail
# shellcheck source=lib.sh
. "$(dirname "$0")/lib.sh"
cd "$BENCH_ROOT"
files=${1:-2000}
: "${NOTRACE_GUST:=$HOME/.cache/gust-notrace/gust}"
work=${BENCH_DIR:-/dev/shm}/gust-trace-cg.$$
bench_scratch "$work"
# shellcheck disable=SC2016 # evaluated on exit
bench_on_exit '[ -z "${dpid:-}" ] || { kill -TERM "$dpid"; wait "$dpid"; } 2>/dev/null'
mkdir -p "$work"
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
  bench_wait 60 "the daemon under callgrind" grep -qs '^daemon' "$r/gust.hosts"
  env "${envs[@]}" valgrind --tool=callgrind --trace-children=yes --callgrind-out-file="$r/client.%p.cg" \
    "$g" bench md -n "$files" -p 1 --hosts-file "$r/gust.hosts" >/dev/null 2>"$r/client.log"
  kill -TERM "$dpid"
  wait "$dpid" || true
  dpid=
  d=$(callgrind_annotate "$r/daemon.cg" 2>/dev/null | awk '/PROGRAM TOTALS/ {gsub(",", "", $1); print $1}')
  c=0
  for f in "$r"/client.*.cg; do # the benchmark and its worker process
    c=$((c + $(callgrind_annotate "$f" 2>/dev/null | awk '/PROGRAM TOTALS/ {gsub(",", "", $1); print $1}')))
  done
  ops=$((files * 4))
  printf '%-8s %14s %14s %12.0f %12.0f\n' "$v" "$d" "$c" "$(bench_div "$d" "$ops")" "$(bench_div "$c" "$ops")"
done
