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
cd "$(dirname "$0")/.."
. scripts/env.sh
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
cargo build --release >/dev/null
base=${BENCH_DIR:-/dev/shm}/gust-pjd.$$
mnt=$base/mnt
mkdir -p "$mnt" bench/results
out=bench/results/pjdfstest-$front-$(date +%Y%m%d-%H%M).json
cleanup() {
  cd /
  "$GUST" umount "$mnt" >/dev/null 2>&1 || "$GUST" umount --lazy "$mnt" >/dev/null 2>&1 || true
  "$GUST" stop --rootdir "$base/fs" >/dev/null 2>&1 || true
  rm -rf "$base"
}
trap cleanup EXIT
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
    "$GUST" start --local 3 --rootdir "$base/fs" >/dev/null
    "$GUST" mount -d "$mnt" --rootdir "$base/fs" --allow-other --log "$base/mount.log" >/dev/null
    run "$mnt"
    ;;
  preload)
    "$GUST" start --local 3 --rootdir "$base/fs" --mountdir "$mnt" >/dev/null
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
