#!/usr/bin/env bash
# Builds the MPI-IO tests of ROMIO's own test suite (MPICH's src/mpi/romio/test,
# the suite issue 32 names) against Debian's Open MPI, and prints the directory of the
# test programs. The source is Debian's MPICH source tarball (deb.debian.org, checked
# against the SHA-256 Debian's Sources index gives); built once into
# $GUST_ROMIO_DIR (default ~/.cache/gustfs-romio), a few seconds; later runs reuse it.
#
# Built: the C tests that runtests runs with a file name. Left out:
#  * i_noncontig, noncontig, noncontig_coll, noncontig_coll2: they use MPI_LB and
#    MPI_UB, removed in MPI-3.0, which Open MPI 4.1's mpi.h refuses;
#  * misc, large_file (.c.in: need MPICH's configure), the Fortran tests, perf and
#    coll_perf (timings, no checks), syshints (ROMIO's hint file parsing).
set -euo pipefail
VERSION=4.0.2
SHA256=b27039f964afeb6b8a3e009c56b441cbe368c26d6d6476ad3bb7190996875860
TESTS="simple async async-multiple atomicity coll_test excl file_info aggregation1 aggregation2 hindexed
  shared_fp ordered_fp split_coll psimple error status types_with_zeros darray_read"
dir="${GUST_ROMIO_DIR:-$HOME/.cache/gustfs-romio}"
bin="$dir/bin-$VERSION"
if [ -f "$bin/.complete" ]; then
  echo "$bin"
  exit 0
fi
command -v mpicc >/dev/null || { echo "romio: mpicc missing (scripts/setup.sh installs libopenmpi-dev)" >&2; exit 1; }
mkdir -p "$dir"
tarball="$dir/mpich_$VERSION.orig.tar.xz"
if ! echo "$SHA256  $tarball" | sha256sum -c --status 2>/dev/null; then
  echo "romio: fetching MPICH $VERSION's source from deb.debian.org" >&2
  curl -fsSL -o "$tarball.part" "https://deb.debian.org/debian/pool/main/m/mpich/mpich_$VERSION.orig.tar.xz"
  echo "$SHA256  $tarball.part" | sha256sum -c --status || { echo "romio: checksum mismatch" >&2; exit 1; }
  mv "$tarball.part" "$tarball"
fi
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
tar -xJf "$tarball" -C "$work" "mpich-$VERSION/src/mpi/romio/test"
src="$work/mpich-$VERSION/src/mpi/romio/test"
rm -rf "$bin"
mkdir -p "$bin"
for t in $TESTS; do
  mpicc -O1 -o "$bin/$t" "$src/$t.c"
done
touch "$bin/.complete"
echo "romio: built $(echo $TESTS | wc -w) tests into $bin" >&2
echo "$bin"
