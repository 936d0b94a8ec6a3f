#!/usr/bin/env bash
# pjdfstest (a POSIX conformance suite: github.com/pjd/pjdfstest) through a FUSE mount
# of a 3-daemon instance (--allow-other, as root) and, with `preload`, through the
# preload library (`gust run`). Prints passed/total cases per test directory and in
# all, and writes bench/results/pjdfstest-<front>-<date>.json.
# Usage: bench/run_pjdfstest.sh [fuse|preload|tmpfs] [PJDFSTEST_DIR]
#   PJD_TESTS="link rename": only these test directories.
#   PJDFSTEST_DIR: a built pjdfstest checkout (default: built from the mirror the
#   `fetch` tool leaves in /work/.mirror, or from $PJDFSTEST_GIT).
# Needs root (the suite changes owners) and prove (Debian's perl).
set -euo pipefail
# shellcheck source=lib.sh
. "$(dirname "$0")/lib.sh"
cd "$BENCH_ROOT"
front=${1:-fuse}
src=${2:-${PJDFSTEST_DIR:-}}
if [ -z "$src" ]; then
  src=${TMPDIR:-/tmp}/pjdfstest.build
  if [ ! -x "$src/pjdfstest" ]; then
    rm -rf "$src"
    git clone -q "${PJDFSTEST_GIT:-/work/.mirror/pjd+pjdfstest/repo}" "$src"
    (cd "$src" && autoreconf -ifs >/dev/null 2>&1 && ./configure -q >/dev/null && make -s pjdfstest >/dev/null)
  fi
fi
bench_build
base=${BENCH_DIR:-/dev/shm}/gust-pjd.$$
bench_scratch "$base"
bench_on_exit 'cd /'
mnt=$base/mnt
mkdir -p "$mnt"
out=$(bench_result "pjdfstest-$front")
run() { # where: the directory the suite runs in; rest: the command prefix
  local where=$1
  shift
  local dirs=()
  for t in ${PJD_TESTS:-}; do dirs+=("$src/tests/$t"); done
  [ ${#dirs[@]} -gt 0 ] || dirs=("$src/tests")
  (cd "$where" && "$@" prove -r "${dirs[@]}" 2>&1) > "$base/prove.log" || true
}
case $front in
  tmpfs)
    mount -t tmpfs none "$mnt"
    run "$mnt"
    umount "$mnt"
    ;;
  fuse)
    bench_start "$GUST" 3 "$base/fs"
    bench_mount "$GUST" "$mnt" --rootdir "$base/fs" --allow-other --log "$base/mount.log"
    run "$mnt"
    ;;
  preload)
    bench_start "$GUST" 3 "$base/fs" --mountdir "$mnt"
    # The shell's cd goes through the library, which keeps the working directory
    # inside the instance (a real directory of the mount point's name is another).
    dirs=()
    for t in ${PJD_TESTS:-}; do dirs+=("$src/tests/$t"); done
    [ ${#dirs[@]} -gt 0 ] || dirs=("$src/tests")
    "$GUST" run --rootdir "$base/fs" -- sh -c 'cd "$1" && shift && prove -r "$@" 2>&1' sh "$mnt" "${dirs[@]}" \
      > "$base/prove.log" || true
    ;;
  *) echo "usage: $0 [fuse|preload|tmpfs] [PJDFSTEST_DIR]" >&2; exit 2 ;;
esac
cp "$base/prove.log" "bench/results/pjdfstest-$front-last.log"
python3 - "$base/prove.log" "$out" "$front" <<'PY'
import collections, json, re, sys
log, out, front = sys.argv[1:]
text = open(log, errors="replace").read()
m = re.search(r"Files=(\d+), Tests=(\d+)", text)
total = int(m.group(2)) if m else 0
failed = collections.Counter()
for f, d, n in re.findall(r"^(\S*/tests/(\w+)/\S+\.t)\s+\(Wstat: \d+ Tests: \d+ Failed: (\d+)\)", text, re.M):
    failed[d] += int(n)
bad = sum(failed.values())
res = {"front": front, "total": total, "failed": bad, "passed": total - bad,
       "pass_ratio": round((total - bad) / total, 4) if total else 0, "failed_by_dir": dict(failed)}
json.dump(res, open(out, "w"))
print(f"pjdfstest through {front}: {total - bad:,} of {total:,} cases pass ({100 * res['pass_ratio']:.1f}%)")
for d, n in failed.most_common():
    print(f"  {d:<16} {n:>6,} failed")
PY
