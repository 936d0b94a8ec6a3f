#!/usr/bin/env bash
# Installs GustFS under a prefix, small enough to copy to every node of a cluster:
#
#   scripts/install.sh PREFIX            # e.g. /usr/local, or /shared/sw/gustfs
#
# PREFIX/bin/gust and PREFIX/bin/libgust_preload.so (`gust run` finds the library
# next to the binary), PREFIX/lib/libgust.so and PREFIX/include/gust.h (the C API).
# The release build keeps debug information for profiling (the root Cargo.toml:
# `debug = 1`, RocksDB's C++ with -g): about 370 MB, almost all of it DWARF. The
# installed copies are stripped of it; it goes to PREFIX/bin/.debug/NAME.debug and
# PREFIX/lib/.debug/NAME.debug, tied to each file by a GNU debuglink (and build id),
# where perf, gdb and valgrind look for it. A site that ships only PREFIX/bin to
# the nodes leaves .debug/ out. Builds first if the build is missing.
set -euo pipefail
prefix=${1:?usage: scripts/install.sh PREFIX}
mkdir -p "$prefix"
prefix=$(cd "$prefix" && pwd)
cd "$(dirname "$0")/.."
. scripts/env.sh
release=$(realpath -m "$CARGO_TARGET_DIR/release")
if [ ! -x "$release/gust" ] || [ ! -f "$release/libgust_preload.so" ] || [ ! -f "$release/libgust.so" ]; then
  cargo build --release -p gust-cli -p gust-preload -p gust-capi
fi
command -v objcopy >/dev/null || { echo "install: objcopy (binutils) is needed" >&2; exit 1; }
mkdir -p "$prefix/bin/.debug" "$prefix/lib/.debug" "$prefix/include"

# install_split SRC DIR MODE: DIR/NAME without debug information, DIR/.debug/NAME.debug
# with it, linked by name and CRC (the debuglink) so a debugger finds the one that
# belongs to this build. Written beside and renamed, so a running binary is never
# overwritten in place.
install_split() {
  local src=$1 dir=$2 mode=$3 name
  name=$(basename "$src")
  objcopy --only-keep-debug --compress-debug-sections "$src" "$dir/.debug/$name.debug.tmp"
  mv -f "$dir/.debug/$name.debug.tmp" "$dir/.debug/$name.debug"
  chmod 644 "$dir/.debug/$name.debug"
  # The debuglink names the file; objcopy computes its CRC from the path given.
  (cd "$dir" && objcopy --strip-debug --add-gnu-debuglink=".debug/$name.debug" "$src" "$name.tmp")
  chmod "$mode" "$dir/$name.tmp"
  mv -f "$dir/$name.tmp" "$dir/$name"
  printf 'install: %-40s %6s MiB (debug information: %s MiB in .debug/%s.debug)\n' "$dir/$name" \
    "$(($(stat -c %s "$dir/$name") >> 20))" "$(($(stat -c %s "$dir/.debug/$name.debug") >> 20))" "$name"
}

install_split "$release/gust" "$prefix/bin" 755
install_split "$release/libgust_preload.so" "$prefix/bin" 755
install_split "$release/libgust.so" "$prefix/lib" 755
install -m 644 crates/capi/include/gust.h "$prefix/include/gust.h"
echo "install: done; for the SLURM site integration: slurm/install.sh /etc/slurm $prefix/bin/gust"
