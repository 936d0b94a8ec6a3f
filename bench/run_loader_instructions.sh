#!/usr/bin/env bash
# Instructions per file of the data loader (bench/loader.py, one worker), counted
# with valgrind --tool=callgrind, so the machine's load does not change them (the
# complement of bench/run_loader_ab.sh's CPU times): for this build and a previous
# one (BASE_BIN: its gust; BASE_PYENV: a virtual environment with its gustfs), each
# way read through `with gustfs.open(p, "rb") as f: f.read()` (open) and
# gustfs.read_bytes (bytes), and the local copy through Python's own open.
# One daemon under callgrind; its counters are zeroed before and dumped after the
# reading (callgrind_control). The reading process runs under callgrind twice, for
# 1 and for 2 epochs: the difference is the cost of one epoch of FILES files, with
# the interpreter's start, imports and manifest taken out.
# Usage: BASE_BIN=DIR BASE_PYENV=DIR bench/run_loader_instructions.sh [files]   (default 500)
set -euo pipefail
# shellcheck source=lib.sh
. "$(dirname "$0")/lib.sh"
cd "$BENCH_ROOT"
bench_python_env
files=${1:-500}
base_bin=${BASE_BIN:?set BASE_BIN to a directory holding the previous gust binary}
base_py=${BASE_PYENV:?set BASE_PYENV to a virtual environment where the previous gustfs is installed}/bin/python
work=${BENCH_DIR:-/dev/shm}/gust-loader-cg.$$
bench_scratch "$work"
# shellcheck disable=SC2016 # evaluated on exit
bench_on_exit '[ -z "${dpid:-}" ] || { kill -TERM "$dpid"; wait "$dpid"; } 2>/dev/null'
mkdir -p "$work/local"
total() { callgrind_annotate "$1" 2>/dev/null | awk '/PROGRAM TOTALS/ {gsub(",", "", $1); print $1}'; }
# Instructions of every process of one `loader.py read` (the parent and its worker).
client_ir() { # python, target, api, epochs, tag
  local s=0 f
  valgrind --tool=callgrind --callgrind-out-file="$work/$5.%p.cg" "$1" bench/loader.py read --target "$2" \
    --manifest-dir "$work/local" --workers 1 --epochs "$4" --api "$3" >/dev/null 2>"$work/$5.log"
  for f in "$work/$5".*.cg; do s=$((s + $(total "$f"))); done
  rm -f "$work/$5".*.cg
  echo "$s"
}
printf '| way | client Ir/file | daemon Ir/file | total Ir/file |\n|---|---:|---:|---:|\n'
for build in base new; do
  if [ $build = base ]; then g=$base_bin/gust py=$base_py; else g=$GUST py=$GUST_PYTHON; fi
  r=$work/$build
  mkdir -p "$r"
  valgrind --tool=callgrind --callgrind-out-file="$r/daemon.%p.cg" "$g" daemon --rootdir "$r/root" \
    --hosts-file "$r/gust.hosts" 2>"$r/daemon.log" &
  dpid=$!
  bench_wait 60 "the daemon under callgrind" grep -qs '^daemon' "$r/gust.hosts"
  export GUST_HOSTS_FILE=$r/gust.hosts
  only=()
  [ $build = new ] && only=(--gust-only)
  "$py" bench/loader.py make --files "$files" --local "$work/local" --gust /loader "${only[@]}" 2>/dev/null
  for api in open read_bytes; do
    callgrind_control -z "$dpid" >/dev/null 2>&1
    c1=$(client_ir "$py" gust:/loader $api 1 "$build-$api-1")
    c2=$(client_ir "$py" gust:/loader $api 2 "$build-$api-2")
    rm -f "$r"/daemon.*.cg.*
    callgrind_control -d "$dpid" >/dev/null 2>&1
    sleep 1
    d=0
    for f in "$r"/daemon.*.cg.*; do d=$((d + $(total "$f"))); done
    # The daemon served 3 epochs (1 + 2) of the data set.
    printf '| %s-%s | %d | %d | %d |\n' $build $api $(((c2 - c1) / files)) $((d / (3 * files))) \
      $(((c2 - c1) / files + d / (3 * files)))
  done
  kill -TERM "$dpid"
  wait "$dpid" || true
  dpid=
done
for api in open read_bytes; do
  c1=$(client_ir "$GUST_PYTHON" "posix:$work/local" $api 1 "local-$api-1")
  c2=$(client_ir "$GUST_PYTHON" "posix:$work/local" $api 2 "local-$api-2")
  printf '| local-%s | %d | 0 | %d |\n' $api $(((c2 - c1) / files)) $(((c2 - c1) / files))
done
