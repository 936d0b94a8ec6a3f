#!/bin/bash
# Installs GustFS's SLURM integration: one step for a site.
#
#   slurm/install.sh SLURM_CONF_DIR GUST_BINARY [GRACE_HOURS]
#
# Copies burst_buffer.lua into SLURM_CONF_DIR (next to slurm.conf) and the task
# prolog, task epilog and epilog scripts into SLURM_CONF_DIR/gustfs/, with the path
# of the gust binary (the same on every node) and the grace period for data whose
# stage-out failed (default 24 h) filled in, and prints the slurm.conf lines to add.
# The scripts must be on every node (a configuration management copy, or the same
# shared /etc/slurm); burst_buffer.lua only on the controller.
set -euo pipefail
conf=${1:?SLURM configuration directory}; gust=${2:?path of the gust binary}; grace=${3:-24}
rootdirs="/tmp /dev/shm"
here=$(cd "$(dirname "$0")" && pwd)
[ -x "$gust" ] || { echo "install: $gust is not an executable" >&2; exit 1; }
mkdir -p "$conf/gustfs"
sub() { sed -e "s|@GUST@|$gust|g" -e "s|@GRACE_HOURS@|$grace|g" -e "s|@ALLOWED_ROOTDIRS@|$rootdirs|g" "$1"; }
sub "$here/burst_buffer.lua" > "$conf/burst_buffer.lua"
for s in gust-task-prolog.sh gust-task-epilog.sh gust-epilog.sh; do
  sub "$here/$s" > "$conf/gustfs/$s"
  chmod 755 "$conf/gustfs/$s"
done
cat <<CONF
# Add to slurm.conf (then restart slurmctld and the slurmds):
BurstBufferType=burst_buffer/lua
TaskProlog=$conf/gustfs/gust-task-prolog.sh
TaskEpilog=$conf/gustfs/gust-task-epilog.sh
Epilog=$conf/gustfs/gust-epilog.sh
# Recommended: jobs start right after their (empty) burst-buffer stage-in.
SchedulerParameters=bf_interval=1
CONF
