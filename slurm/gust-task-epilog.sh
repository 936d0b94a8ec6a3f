#!/bin/bash
# GustFS TaskEpilog (slurm/install.sh puts it in place). slurmstepd runs it as the
# job's user after every task. After the batch script of a job with GustFS
# directives it stages out and stops GustFS. If a stage-out fails, GustFS is stopped
# with its data kept on the nodes for the site's grace period (the Epilog removes it
# then), the job's output says which paths and where the data is, and a step named
# gustfs-stage-out-failed that exits 1 makes the job's derived exit code 1 (sacct,
# scontrol -d show job). A job that was cancelled, ran out of time or is ending for
# any other reason than its script finishing is not staged out: the end of the
# daemons' step removes its GustFS.
GUST=@GUST@
GRACE_HOURS=@GRACE_HOURS@
[ -n "${GUST_SITE_JOB:-}" ] || exit 0
[ -z "${GUST_NODE_AGENT:-}" ] || exit 0
[ -z "${SLURM_STEP_ID:-}" ] || exit 0
base="${GUST_SITE_ROOTDIR:-/tmp}/gustfs-$(id -un)-job$SLURM_JOB_ID"
export GUST_HOSTS_FILE="$base/gust.hosts"
[ -f "$GUST_HOSTS_FILE" ] || exit 0
# The controller's view: while the batch script's TaskEpilog runs, a job whose script
# finished is still RUNNING (it completes when this script is done). A cancelled or
# timed-out job is CANCELLED, TIMEOUT or COMPLETING (slurmctld set the state before it
# signalled the steps): no stage-out, no message.
state=$(scontrol show job "$SLURM_JOB_ID" 2>/dev/null | grep -o 'JobState=[A-Z_]*' | head -1 | cut -d= -f2)
case "$state" in
  RUNNING|"") ;;       # "": the controller did not answer; try, and judge by the outcome
  *) exit 0 ;;
esac
joblog() {
  local out
  out=$(scontrol show job "$SLURM_JOB_ID" 2>/dev/null | grep -o 'StdOut=[^ ]*' | head -1 | cut -d= -f2-)
  if [ -n "$out" ]; then echo "$*" >> "$out"; else echo "$*" >&2; fi
}
failed=()
IFS=',' read -ra pairs <<< "${GUST_SITE_STAGE_OUT:-}"
for p in "${pairs[@]}"; do
  src=${p%%:*} dst=${p#*:}
  if ! out=$("$GUST" stage out "$src" "$dst" 2>&1); then
    failed+=("$src -> $dst ($(echo "$out" | tr '\n' ' ' | sed 's/ *$//'))")
  fi
done
if ((${#failed[@]})); then
  # The instance went away meanwhile: the job is ending (cancelled while staging
  # out); nothing is kept and there is nothing to say.
  [ -f "$GUST_HOSTS_FILE" ] || exit 0
  "$GUST" stop --keep >/dev/null 2>&1
  joblog "gust: stage-out failed: ${failed[*]}. Not written back; the job's GustFS data is kept for $GRACE_HOURS h on nodes $SLURM_JOB_NODELIST in $base (daemon root directories d<N>, hosts file gust.hosts). To write it back in a later job on the same nodes: gust start --restart --rootdir $base; gust stage out SRC DEST; gust stop (docs/GUIDE.md)."
  # The job's derived exit code: the highest exit code of its steps.
  srun --overlap -N1 -n1 --job-name=gustfs-stage-out-failed \
    --export=ALL,GUST_NODE_AGENT=1 false >/dev/null 2>&1
  exit 1
fi
"$GUST" stop >/dev/null 2>&1
[ -z "${GUST_SITE_STAGE_OUT:-}" ] || joblog "gust: staged out: $GUST_SITE_STAGE_OUT"
exit 0
