#!/usr/bin/env bash
# Starts a 4-daemon GustFS instance on this machine, runs a short workload through
# it (stage a tree in, list it, read it, stage it out and compare; unmodified
# programs through the LD_PRELOAD library and through a FUSE mount; a metadata and an
# I/O benchmark against the local file system), and stops it.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
. scripts/env.sh
cargo build --release -p gust-cli -p gust-preload
root=$(mktemp -d /tmp/gust-demo.XXXXXX)
trap '"$GUST" umount "$root/mnt" >/dev/null 2>&1 || true; "$GUST" stop --rootdir "$root/fs" >/dev/null 2>&1 || true; rm -rf "$root"' EXIT
eval "$("$GUST" start --local 4 --rootdir "$root/fs")"
"$GUST" status
"$GUST" stage in crates /src
"$GUST" ls /src
"$GUST" cat /src/cli/Cargo.toml | head -n 3
"$GUST" stage out /src "$root/out"
diff -r crates "$root/out" && echo "demo: staged tree round-trips identically"
# Unmodified programs through the preload library: paths under $GUST_MOUNTDIR.
"$GUST" run -- bash -c 'cp -r crates /gustfs/copy && diff -r crates /gustfs/copy && tar cf /gustfs/src.tar -C /gustfs src && ls -l /gustfs && echo "demo: coreutils, diff and tar ran on GustFS through the preload library"'
# And through a FUSE mount, where /dev/fuse is usable.
mkdir -p "$root/mnt"
if [ -e /dev/fuse ] && "$GUST" mount -d "$root/mnt" --log "$root/mount.log" >/dev/null 2>&1; then
  diff -r crates "$root/mnt/copy" && du -sh "$root/mnt/src" && echo "demo: the same tree read through the FUSE mount"
  "$GUST" umount "$root/mnt"
else
  echo "demo: FUSE not available here; skipped the mount"
fi
mkdir -p "$root/local"
"$GUST" bench md -n 2000 -p 2 --baseline "$root/local"
"$GUST" bench io -p 2 -b 32MiB -t 1MiB --baseline "$root/local"
"$GUST" stop --rootdir "$root/fs"
