#!/bin/bash
# GustFS TaskEpilog (slurm/install.sh puts it in place). slurmstepd runs it as the
# job's user after every task. After the batch script of a job with GustFS
# directives it stages out and stops GustFS. If a stage-out fails, GustFS is stopped
# with its data kept on the nodes for the site's grace period (the Epilog removes it
# then), and the job's output says which paths and where the data is.
GUST=@GUST@
GRACE_HOURS=@GRACE_HOURS@
[ -n "${GUST_SITE_JOB:-}" ] || exit 0
[ -z "${GUST_NODE_AGENT:-}" ] || exit 0
[ -z "${SLURM_STEP_ID:-}" ] || exit 0
base="${GUST_SITE_ROOTDIR:-/tmp}/gustfs-$(id -un)-job$SLURM_JOB_ID"
export GUST_HOSTS_FILE="$base/gust.hosts"
[ -f "$GUST_HOSTS_FILE" ] || exit 0
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
  "$GUST" stop --keep >/dev/null 2>&1
  joblog "gust: stage-out failed: ${failed[*]}. Not written back; the job's GustFS data is kept for $GRACE_HOURS h on nodes $SLURM_JOB_NODELIST in $base (daemon root directories d<N>, hosts file gust.hosts)."
  exit 1
fi
"$GUST" stop >/dev/null 2>&1
[ -z "${GUST_SITE_STAGE_OUT:-}" ] || joblog "gust: staged out: $GUST_SITE_STAGE_OUT"
exit 0
