#!/usr/bin/env bash
# Installs what building and testing GustFS needs on Debian 12 (bookworm).
# RocksDB itself is compiled from the sources bundled with the rocksdb crate (see
# .cargo/config.toml); it needs a C++ compiler and libclang (bindgen).
set -euo pipefail
pkgs=(libclang-dev clang g++ pkg-config fuse3 libfuse3-dev fio strace attr git tar python3 libc6-dev iproute2 util-linux)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get update -qq
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
fi
command -v cargo >/dev/null || { echo "setup: Rust (cargo) is required: https://rustup.rs" >&2; exit 1; }
