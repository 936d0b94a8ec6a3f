#!/usr/bin/env bash
# Installs what building and testing GustFS needs on Debian 12 (bookworm).
# RocksDB itself is compiled from the sources bundled with the rocksdb crate (see
# .cargo/config.toml); it needs a C++ compiler and libclang (bindgen). The
# multi-node tests run sshd, munge, slurmctld and slurmd on test nodes they create
# (tests/cluster/testcluster.sh); bc is for bench/start_hosts.sh; prometheus gives
# promtool and a real Prometheus server for the metrics test (tests/tests/observe.rs);
# fonts-dejavu-core is the font `gust trace report` draws its plots' text with; gdb
# checks that installed binaries find their separate debug information
# (tests/tests/install.rs); perl runs on GustFS in the preload library's tests;
# the lock tests run SQLite through python3's sqlite3 module (its standard library);
# rsync -aH copies hard links and python3-h5py (for /usr/bin/python3) opens HDF5 files
# with file locking in tests/tests/posix_conformance.rs; libfabric-dev gives the
# headers the ofi endpoint kind compiles against (crates/transport/build.rs) and
# libfabric1 the library it opens at run time (tests/tests/netns_fabric.rs).
set -euo pipefail
pkgs=(libclang-dev clang g++ pkg-config fuse3 libfuse3-dev fio strace gdb attr git tar rsync perl python3 python3-venv python3-h5py python3-h5py-mpi openmpi-bin libopenmpi-dev libc6-dev iproute2 util-linux
  openssh-server openssh-client munge slurmctld slurmd slurm-client bc prometheus fonts-dejavu-core
  podman runc libfabric-dev)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get update -qq
  # The packages' services must not start here (no slurm.conf yet; the tests start
  # their own daemons): a policy-rc.d that refuses, for the install only.
  policy=""
  if [ ! -e /usr/sbin/policy-rc.d ]; then
    policy=/usr/sbin/policy-rc.d
    printf '#!/bin/sh\nexit 101\n' | $SUDO tee "$policy" >/dev/null && $SUDO chmod 755 "$policy"
  fi
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
  if [ -n "$policy" ]; then $SUDO rm -f "$policy"; fi
fi
command -v cargo >/dev/null || { echo "setup: Rust (cargo) is required: https://rustup.rs" >&2; exit 1; }
# Fuzzing (scripts/fuzz.sh, a short run in scripts/test.sh): libFuzzer needs a nightly
# compiler and cargo-fuzz. Installed for the user running this script.
if ! rustup run nightly rustc --version >/dev/null 2>&1; then
  command -v rustup >/dev/null || { echo "setup: fuzzing needs rustup to install a nightly toolchain: https://rustup.rs" >&2; exit 1; }
  rustup toolchain install nightly --profile minimal ||
    { echo "setup: could not install the nightly toolchain (rustup toolchain install nightly --profile minimal); scripts/fuzz.sh needs it" >&2; exit 1; }
fi
if ! cargo fuzz --version >/dev/null 2>&1; then
  cargo install cargo-fuzz --locked ||
    { echo "setup: could not install cargo-fuzz (cargo install cargo-fuzz --locked); scripts/fuzz.sh needs it" >&2; exit 1; }
fi
