# shellcheck shell=bash
# Sourced by the bench scripts (`. "$(dirname "$0")/lib.sh"`): what they all do the
# same way. Sourcing it
#   * sets BENCH_LIB (this directory) and BENCH_ROOT (the repository), and finds the
#     build as scripts/env.sh does: CARGO_TARGET_DIR (default ~/.cache/gustfs-target),
#     GUST=$CARGO_TARGET_DIR/release/gust, BENCH_PRELOAD (libgust_preload.so beside it).
#     Scripts that compare builds take their binaries as arguments and keep doing so;
#   * arms a trap (EXIT, INT, TERM) that, whatever ends the script, runs the hooks
#     given to bench_on_exit, unmounts every mount bench_mount made, stops every
#     instance bench_start started and removes every directory given to bench_scratch.
# The scripts' own numbers go through bench/stats.py (bench_stats, bench_py).
# Nothing here changes the working directory: scripts that write bench/results or
# run scripts/ do `cd "$BENCH_ROOT"` themselves.

BENCH_LIB=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
BENCH_ROOT=$(dirname "$BENCH_LIB")
# shellcheck source=../scripts/env.sh
. "$BENCH_ROOT/scripts/env.sh"
# shellcheck disable=SC2034 # for the scripts
BENCH_PRELOAD=$(dirname "$GUST")/libgust_preload.so
# shellcheck disable=SC2034
BENCH_HZ=$(getconf CLK_TCK)

# --- the build -------------------------------------------------------------------

# bench_build CARGO_ARGS...: `cargo build --release CARGO_ARGS` in the repository, as the
# scripts did before measuring; GUST_BENCH_NO_BUILD=1 uses the binaries as they are.
bench_build() {
  [ "${GUST_BENCH_NO_BUILD:-}" = 1 ] && return 0
  (cd "$BENCH_ROOT" && cargo build --release "$@" >/dev/null)
}

# bench_python_env: GUST_PYTHON, the virtual environment with this tree's gustfs module
# (scripts/python-env.sh, which builds and installs the wheel); with
# GUST_BENCH_NO_BUILD=1 the environment's interpreter as it is.
bench_python_env() {
  if [ "${GUST_BENCH_NO_BUILD:-}" = 1 ]; then
    export GUST_PYTHON="${GUST_PYENV:-$HOME/.cache/gustfs-pyenv}/bin/python"
  else
    local here=$PWD
    cd "$BENCH_ROOT" || return 1
    # shellcheck source=../scripts/python-env.sh
    . scripts/python-env.sh
    cd "$here" || return 1
  fi
}

# --- scratch directories, results, time ------------------------------------------

# bench_scratch DIR...: removed on exit (after the instances in them are stopped). The
# scripts' scratch directory is ${BENCH_DIR:-/dev/shm}/gust-NAME.$$: the instances' root
# directories and the local baseline on the same storage, tmpfs by default.
bench_scratch() { _bench_dirs+=("$@"); }

# bench_result NAME [SUFFIX]: prints bench/results/NAME-YYYYMMDD-HHMM SUFFIX (default
# .json; UTC, as docs/PERFORMANCE.md dates rows), relative to the repository, whose
# bench/results it creates.
bench_result() {
  mkdir -p "$BENCH_ROOT/bench/results"
  echo "bench/results/$1-$(date -u +%Y%m%d-%H%M)${2-.json}"
}

# bench_now: the wall clock in nanoseconds. bench_elapsed T0 [T1]: seconds from T0 to
# T1 (default now) as S.NNNNNNNNN. bench_time CMD...: runs CMD (its output to
# /dev/null, its errors shown) and prints the seconds it took.
bench_now() { date +%s%N; }
bench_elapsed() {
  local d=$((${2:-$(bench_now)} - $1))
  printf '%d.%09d\n' $((d / 1000000000)) $((d % 1000000000))
}
bench_time() {
  local t0
  t0=$(bench_now)
  "$@" >/dev/null
  bench_elapsed "$t0"
}

# bench_div A B: A / B (for printf).
bench_div() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.15g\n", a / b}'; }

# bench_wait SECONDS WHAT CMD...: polls CMD every 0.05 s until it succeeds; after
# SECONDS, says WHAT did not happen and fails.
bench_wait() {
  local secs=$1 what=$2 i
  shift 2
  for ((i = 0; i < secs * 20; i++)); do
    "$@" && return 0
    sleep 0.05
  done
  echo "bench: $what: not within $secs s" >&2
  return 1
}

# --- round order -----------------------------------------------------------------

# bench_abba ROUND WAY...: the ways in the given order in odd rounds, reversed in even
# ones (ABBA: on a shared machine whichever runs first in a round is favoured).
bench_abba() {
  local r=$1 i _rev=()
  shift
  if ((r % 2)); then
    echo "$*"
  else
    for ((i = $#; i >= 1; i--)); do _rev+=("${!i}"); done
    echo "${_rev[*]}"
  fi
}

# bench_rotate K WAY...: the ways rotated left by K (mod their number): for more than two
# ways, so that none always runs first or last.
bench_rotate() {
  local k=$1
  shift
  local _ways=("$@")
  k=$((k % ${#_ways[@]}))
  echo "${_ways[@]:k}" "${_ways[@]:0:k}"
}

# --- instances and mounts --------------------------------------------------------

# Runs CMD with its errors kept aside and shown only if it fails.
_bench_quiet() {
  "$@" >/dev/null 2>"$_bench_tmp/err" || {
    local rc=$?
    cat "$_bench_tmp/err" >&2
    return "$rc"
  }
}

# bench_start GUST N ROOTDIR [START_ARGS...]: `GUST start --local N --rootdir ROOTDIR
# START_ARGS`, stopped on exit unless bench_stop stops it first.
bench_start() {
  local bin=$1 n=$2 root=$3
  shift 3
  bench_forget "$bin" "$root"
  _bench_instances+=("$bin"$'\t'"$root")
  _bench_quiet "$bin" start --local "$n" --rootdir "$root" "$@"
}

# bench_stop GUST ROOTDIR [STOP_ARGS...]: `GUST stop --rootdir ROOTDIR STOP_ARGS` (which
# removes the daemons' data, not their logs).
bench_stop() {
  local bin=$1 root=$2
  shift 2
  bench_forget "$bin" "$root"
  _bench_quiet "$bin" stop --rootdir "$root" "$@"
}

# bench_forget GUST ROOTDIR: the exit trap no longer stops this instance (the script
# stopped it itself, e.g. with `gust stop --record-reads`).
bench_forget() {
  local e _keep=()
  for e in "${_bench_instances[@]}"; do
    [ "$e" = "$1"$'\t'"$2" ] || _keep+=("$e")
  done
  _bench_instances=("${_keep[@]}")
}

# bench_daemon_pids HOSTS_FILE: the pids of an instance's daemons (both hosts file
# formats: builds before format 2 put the pid in the sixth field).
bench_daemon_pids() {
  awk '$1 == "daemon" {print ($2 ~ /^[0-9]+$/ && $4 ~ /^[0-9]+$/) ? $4 : $6}' "$1"
}

# bench_cpu_ticks PID...: their user + system CPU time in clock ticks (BENCH_HZ a
# second), threads that exited included.
bench_cpu_ticks() {
  local t=0 p
  for p in "$@"; do t=$((t + $(awk '{print $14 + $15}' "/proc/$p/stat"))); done
  echo "$t"
}

# bench_mount GUST MOUNTPOINT [MOUNT_ARGS...]: `GUST mount -d MOUNTPOINT MOUNT_ARGS`
# (detached; its messages go to --log if given), then waits until the kernel shows
# the mount. Unmounted on exit unless bench_umount unmounts it first.
bench_mount() {
  local bin=$1 mnt=$2
  shift 2
  _bench_mounts+=("$bin"$'\t'"$mnt")
  _bench_quiet "$bin" mount -d "$mnt" "$@" &&
    bench_wait 30 "mount at $mnt" mountpoint -q "$mnt"
}

_bench_mounted() { grep -q " $1 " /proc/mounts; }
# bench_umount GUST MOUNTPOINT: unmounts (lazily if busy) and waits until it is gone.
bench_umount() {
  local bin=$1 mnt=$2 e _keep=()
  for e in "${_bench_mounts[@]}"; do
    [ "$e" = "$bin"$'\t'"$mnt" ] || _keep+=("$e")
  done
  _bench_mounts=("${_keep[@]}")
  "$bin" umount "$mnt" >/dev/null 2>&1 || "$bin" umount --lazy "$mnt" >/dev/null 2>&1 || true
  local i
  for ((i = 0; i < 100; i++)); do
    _bench_mounted "$mnt" || return 0
    sleep 0.05
  done
  echo "bench: $mnt still mounted after 5 s" >&2
}

# --- the exit trap ---------------------------------------------------------------

# bench_on_exit CMD: evaluates CMD on exit, before mounts and instances are taken down.
bench_on_exit() { _bench_hooks+=("$1"); }

bench_cleanup() {
  local rc=$? e
  trap - EXIT
  trap '' INT TERM # taking everything down is not interrupted
  set +e
  for e in "${_bench_hooks[@]}"; do eval "$e"; done
  for e in "${_bench_mounts[@]}"; do bench_umount "${e%%$'\t'*}" "${e#*$'\t'}"; done
  for e in "${_bench_instances[@]}"; do "${e%%$'\t'*}" stop --rootdir "${e#*$'\t'}" >/dev/null 2>&1; done
  rm -rf "${_bench_dirs[@]}" "$_bench_tmp"
  return "$rc"
}

# bench_trap: arms the trap (sourcing does). A subshell that starts instances arms it
# again, since subshells do not inherit it: its trap then takes down only what the
# subshell itself registers.
bench_trap() {
  _bench_hooks=() _bench_mounts=() _bench_instances=() _bench_dirs=()
  _bench_tmp=$(mktemp -d "${TMPDIR:-/tmp}/gust-bench-lib.XXXXXX")
  trap bench_cleanup EXIT
  trap 'exit 130' INT
  trap 'exit 143' TERM
}
bench_trap

# --- numbers ---------------------------------------------------------------------

# bench_stats ARGS...: bench/stats.py's command line (median, paired, rates, record).
bench_stats() { python3 "$BENCH_LIB/stats.py" "$@"; }
# bench_py ARGS...: python3 with bench/ on its path (`bench_py - "$out" <<'PY'` for a
# report that imports stats). BENCH_PYTHON picks another interpreter.
bench_py() { PYTHONPATH="$BENCH_LIB${PYTHONPATH:+:$PYTHONPATH}" "${BENCH_PYTHON:-python3}" "$@"; }
