#!/bin/bash
# GustFS TaskProlog (slurm/install.sh puts it in place). slurmstepd runs it as the
# job's user before every task; "export" lines reach the task's environment, "print"
# lines the job's output, and a non-zero exit fails the task (and with it the job).
# Before the batch script of a job with GustFS directives it starts GustFS on the
# job's nodes (one srun step, bound to the job: its end stops and removes it) and
# stages in; before every other task it only exports the environment.
GUST=@GUST@
[ -n "${GUST_SITE_JOB:-}" ] || exit 0      # no directives: untouched
[ -z "${GUST_NODE_AGENT:-}" ] || exit 0    # GustFS's own daemon step
base="${GUST_SITE_ROOTDIR:-/tmp}/gustfs-$(id -un)-job$SLURM_JOB_ID"
echo "export GUST_HOSTS_FILE=$base/gust.hosts"
echo "export GUST_MOUNTDIR=${GUST_SITE_MOUNTDIR:-/gustfs}"
[ -z "${SLURM_STEP_ID:-}" ] || exit 0      # a step: environment only

oneline() { tr '\n' ' ' | sed 's/ *$//'; }
if ! out=$("$GUST" start --rootdir "$base" --mountdir "${GUST_SITE_MOUNTDIR:-/gustfs}" 2>&1 >/dev/null); then
  echo "print gust: GustFS did not start for job $SLURM_JOB_ID: $(echo "$out" | oneline)"
  exit 1
fi
IFS=',' read -ra pairs <<< "${GUST_SITE_STAGE_IN:-}"
for p in "${pairs[@]}"; do
  src=${p%%:*} dst=${p#*:}
  if ! out=$(GUST_HOSTS_FILE="$base/gust.hosts" "$GUST" stage in "$src" "$dst" 2>&1); then
    echo "print gust: stage-in of $src to $dst failed, the job does not run: $(echo "$out" | oneline)"
    GUST_HOSTS_FILE="$base/gust.hosts" "$GUST" stop >/dev/null 2>&1
    exit 1
  fi
done
echo "print gust: GustFS up on $SLURM_JOB_NUM_NODES node(s) at ${GUST_SITE_MOUNTDIR:-/gustfs}; staged in: ${GUST_SITE_STAGE_IN:-nothing}"
exit 0
