#!/usr/bin/env bash
# Test hosts on this machine: N "nodes", each in its own network, UTS and mount
# namespace (own address 10.78.K.<i+2> on a bridge the script creates, own host name
# gnode<i>, own /tmp on a private tmpfs: node-local storage that no other node sees).
# Optionally sshd on every node and a SLURM cluster (munged, slurmctld here, one
# slurmd per node). Used by the end-to-end tests (tests/src/cluster.rs); needs root.
#
#   testcluster.sh up DIR K N       create the nodes (DIR: not under /tmp)
#   testcluster.sh sshd DIR         start sshd on every node (key in DIR/id)
#   testcluster.sh slurm DIR [lua]  start munged, slurmctld and the slurmds
#   testcluster.sh exec DIR I CMD…  run CMD on node I (in its namespaces)
#   testcluster.sh down DIR         stop everything, remove namespaces and links
set -euo pipefail

cmd=${1:?command}; dir=${2:?dir}
# The machine's one munged and the test clusters using it (see `slurm`).
munge_lock=/run/lock/gust-testcluster-munge.lock
munge_users=/run/gust-testcluster-munge

state() { . "$dir/state"; }
ns() { echo "gc${tag}n$1"; }
anchor_pid() { cat "$dir/node$1.pid"; }
on_node() { local i=$1; shift; nsenter -t "$(anchor_pid "$i")" -n -u -m -- "$@"; }

case "$cmd" in
up)
  k=${3:?subnet index}; n=${4:?node count}
  case "$dir" in /tmp/*) echo "testcluster: DIR must not be under /tmp (nodes have their own /tmp)" >&2; exit 2;; esac
  mkdir -p "$dir"; chmod 755 "$dir"
  tag=$(( ($$ + k * 7919) % 100000 ))
  printf 'tag=%s\nk=%s\nn=%s\n' "$tag" "$k" "$n" > "$dir/state"
  ip link add "gb$tag" type bridge
  ip addr add "10.78.$k.1/24" dev "gb$tag"
  ip link set "gb$tag" up
  for ((i = 0; i < n; i++)); do
    ip netns add "$(ns "$i")"
    ip link add "gv${tag}h$i" type veth peer name "gv${tag}n$i"
    ip link set "gv${tag}h$i" master "gb$tag" up
    ip link set "gv${tag}n$i" netns "$(ns "$i")"
    ip -n "$(ns "$i")" addr add "10.78.$k.$((i + 2))/24" dev "gv${tag}n$i"
    ip -n "$(ns "$i")" link set "gv${tag}n$i" up
    ip -n "$(ns "$i")" link set lo up
    # The anchor holds the node's UTS and mount namespaces; everything of the node
    # is started with nsenter into it. ip netns exec is not used: it remounts /sys
    # and hides /sys/fs/cgroup, which slurmd needs.
    nsenter --net="/run/netns/$(ns "$i")" unshare --uts --mount --propagation private -- \
      sh -c "hostname gnode$i && mount -t tmpfs -o size=1g,mode=1777 tmpfs /tmp && exec sleep 100000" \
      </dev/null >/dev/null 2>&1 &
    echo $! > "$dir/node$i.pid"
  done
  # Wait until every node has its host name and its own /tmp.
  for ((i = 0; i < n; i++)); do
    for _ in $(seq 100); do
      [ "$(on_node "$i" hostname 2>/dev/null)" = "gnode$i" ] && on_node "$i" mountpoint -q /tmp && break
      sleep 0.05
    done
    [ "$(on_node "$i" hostname)" = "gnode$i" ] || { echo "testcluster: node $i did not come up" >&2; exit 1; }
  done
  ;;
sshd)
  state
  mkdir -p /run/sshd
  [ -f "$dir/id" ] || ssh-keygen -q -t ed25519 -N '' -f "$dir/id"
  [ -f "$dir/hostkey" ] || ssh-keygen -q -t ed25519 -N '' -f "$dir/hostkey"
  cp "$dir/id.pub" "$dir/authorized_keys"
  {
    echo "Host *"
    echo "  User root"
    echo "  IdentityFile $dir/id"
    echo "  IdentitiesOnly yes"
    echo "  StrictHostKeyChecking no"
    echo "  UserKnownHostsFile /dev/null"
    echo "  LogLevel ERROR"
    for ((i = 0; i < n; i++)); do printf 'Host gnode%s\n  HostName 10.78.%s.%s\n' "$i" "$k" "$((i + 2))"; done
  } > "$dir/ssh_config"
  for ((i = 0; i < n; i++)); do
    cat > "$dir/sshd$i.conf" <<CONF
ListenAddress 10.78.$k.$((i + 2))
HostKey $dir/hostkey
AuthorizedKeysFile $dir/authorized_keys
StrictModes no
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
PidFile /tmp/sshd.pid
MaxStartups 100
CONF
    on_node "$i" /usr/sbin/sshd -f "$dir/sshd$i.conf" -E "$dir/sshd$i.log"
  done
  for ((i = 0; i < n; i++)); do
    for _ in $(seq 100); do
      ssh -F "$dir/ssh_config" -o ConnectTimeout=2 "gnode$i" true 2>/dev/null && break
      sleep 0.1
    done
    ssh -F "$dir/ssh_config" -o ConnectTimeout=2 "gnode$i" true || { echo "testcluster: sshd on gnode$i does not answer" >&2; exit 1; }
  done
  ;;
slurm)
  state
  # munged: one per machine, its socket works across network namespaces, shared by
  # every test cluster up at once (tests run in parallel). Under a lock: start it
  # (as the munge user) only if none answers, and count this cluster as a user, so
  # that the last cluster to go stops the munged a cluster started (`down`).
  (
    flock 9
    if ! munge -n </dev/null 2>/dev/null | unmunge >/dev/null 2>&1; then
      mkdir -p /run/munge && chown munge:munge /run/munge && chmod 755 /run/munge
      [ -f /etc/munge/munge.key ] || { mungekey -c 2>/dev/null || /usr/sbin/create-munge-key -f; chown munge:munge /etc/munge/munge.key; }
      # Not holding the lock: munged keeps the descriptors it was given.
      runuser -u munge -- /usr/sbin/munged 9>&-
      mkdir -p "$munge_users"
      cat /run/munge/munged.pid > "$munge_users/started.pid"
      for _ in $(seq 50); do munge -n </dev/null 2>/dev/null | unmunge >/dev/null 2>&1 && break; sleep 0.1; done
    fi
    mkdir -p "$munge_users" && touch "$munge_users/user-$tag"
  ) 9>"$munge_lock"
  mkdir -p "$dir/etc" "$dir/ctld" "$dir/log"
  chmod 755 "$dir/log"
  ctl=$(hostname)
  {
    echo "ClusterName=gust$k"
    echo "SlurmctldHost=$ctl(10.78.$k.1)"
    echo "SlurmctldPort=$((17000 + k))"
    echo "SlurmdPort=$((17100 + k))"
    echo "AuthType=auth/munge"
    echo "SlurmUser=root"
    echo "SlurmdUser=root"
    echo "StateSaveLocation=$dir/ctld"
    echo "SlurmdSpoolDir=/tmp/slurmd-%n"
    echo "SlurmctldPidFile=$dir/slurmctld.pid"
    echo "SlurmdPidFile=/tmp/slurmd.pid"
    echo "SlurmctldLogFile=$dir/log/slurmctld.log"
    echo "SlurmdLogFile=$dir/log/slurmd-%n.log"
    echo "ProctrackType=proctrack/linuxproc"
    echo "TaskPlugin=task/none"
    echo "JobAcctGatherType=jobacct_gather/none"
    echo "SelectType=select/cons_tres"
    echo "SelectTypeParameters=CR_Core"
    echo "SchedulerType=sched/backfill"
    echo "SchedulerParameters=bf_interval=1"
    echo "ReturnToService=2"
    echo "MpiDefault=none"
    echo "KillWait=5"
    echo "MinJobAge=300"
    echo "InactiveLimit=0"
    echo "OverTimeLimit=0"
    # Site integration under test, if the test wrote these files.
    [ -f "$dir/etc/site.conf" ] && cat "$dir/etc/site.conf"
    for ((i = 0; i < n; i++)); do echo "NodeName=gnode$i NodeAddr=10.78.$k.$((i + 2)) CPUs=2 State=UNKNOWN"; done
    echo "PartitionName=test Nodes=gnode[0-$((n - 1))] Default=YES MaxTime=INFINITE State=UP"
  } > "$dir/etc/slurm.conf"
  export SLURM_CONF="$dir/etc/slurm.conf"
  /usr/sbin/slurmctld -i -f "$SLURM_CONF"
  for ((i = 0; i < n; i++)); do
    on_node "$i" sh -c "mkdir -p /tmp/slurmd-gnode$i && /usr/sbin/slurmd -f $SLURM_CONF -N gnode$i"
  done
  for _ in $(seq 150); do
    [ "$(sinfo -h -o '%T' 2>/dev/null | sort -u)" = "idle" ] && break
    sleep 0.2
  done
  [ "$(sinfo -h -o '%T' | sort -u)" = "idle" ] || { sinfo >&2; tail -5 "$dir"/log/*.log >&2; exit 1; }
  ;;
exec)
  state
  i=${3:?node}; shift 3
  on_node "$i" "$@"
  ;;
down)
  [ -f "$dir/state" ] || exit 0
  state
  if [ -f "$dir/slurmctld.pid" ]; then kill -9 "$(cat "$dir/slurmctld.pid")" 2>/dev/null || true; fi
  (
    flock 9
    rm -f "$munge_users/user-$tag"
    if [ -f "$munge_users/started.pid" ] && ! compgen -G "$munge_users/user-*" >/dev/null; then
      kill "$(cat "$munge_users/started.pid")" 2>/dev/null || true
      rm -f "$munge_users/started.pid"
    fi
  ) 9>"$munge_lock"
  for ((i = 0; i < n; i++)); do
    # Every process of the node: sshd, slurmd, daemons, agents, job steps.
    for p in $(ip netns pids "$(ns "$i")" 2>/dev/null); do kill -9 "$p" 2>/dev/null || true; done
    ip link del "gv${tag}h$i" 2>/dev/null || true
    ip netns del "$(ns "$i")" 2>/dev/null || true
  done
  ip link del "gb$tag" 2>/dev/null || true
  ;;
*)
  echo "testcluster: unknown command $cmd" >&2; exit 2
  ;;
esac
