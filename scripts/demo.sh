#!/usr/bin/env bash
# Starts a 4-daemon GustFS instance on this machine, runs a short workload through
# it (stage a tree in, list it, read it, stage it out and compare, a metadata and
# an I/O benchmark against the local file system), and stops it.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
. scripts/env.sh
cargo build --release -p gust-cli
root=$(mktemp -d /tmp/gust-demo.XXXXXX)
trap '"$GUST" stop --rootdir "$root/fs" >/dev/null 2>&1 || true; rm -rf "$root"' EXIT
eval "$("$GUST" start --local 4 --rootdir "$root/fs")"
"$GUST" status
"$GUST" stage in crates /src
"$GUST" ls /src
"$GUST" cat /src/cli/Cargo.toml | head -n 3
"$GUST" stage out /src "$root/out"
diff -r crates "$root/out" && echo "demo: staged tree round-trips identically"
mkdir -p "$root/local"
"$GUST" bench md -n 2000 -p 2 --baseline "$root/local"
"$GUST" bench io -p 2 -b 32MiB -t 1MiB --baseline "$root/local"
"$GUST" stop --rootdir "$root/fs"
