#!/bin/bash
# GustFS Epilog (slurm/install.sh puts it in place). slurmd runs it as root on every
# node after every job. A job's GustFS directory still present here was kept on
# purpose (its stage-out failed): it gets a deadline of GRACE_HOURS. Directories whose
# deadline passed are removed. Cheap for every other job: one glob per root directory.
GRACE_HOURS=@GRACE_HOURS@
ROOTDIRS="@ALLOWED_ROOTDIRS@"
now=$(date +%s)
for r in $ROOTDIRS; do
  for d in "$r"/gustfs-*-job*; do
    [ -d "$d" ] || continue
    if [ "${d##*-job}" = "${SLURM_JOB_ID:-}" ] && [ ! -f "$d/keep-until" ]; then
      echo $((now + GRACE_HOURS * 3600)) > "$d/keep-until"
    fi
    if [ -f "$d/keep-until" ] && [ "$(cat "$d/keep-until" 2>/dev/null || echo 0)" -le "$now" ]; then
      rm -rf "$d"
    fi
  done
done
exit 0
