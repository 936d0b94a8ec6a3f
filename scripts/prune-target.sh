#!/usr/bin/env bash
# Keeps the shared target directory ($CARGO_TARGET_DIR, outside the clone) from
# filling the disk. Every clone of the repository builds the workspace's own
# crates under new hashes (the path is part of them), so each CI run leaves a full
# set of test binaries and gust-* libraries behind (about 6 GB with debug info,
# RocksDB linked into each); dependencies keep their hashes and are reused. This
# removes, per name, all but the KEEP newest (default 1) of the workspace's test
# binaries and libraries: with 2 kept, a day of clones (CI runs, worktrees for A/B
# builds) filled a disk that had 18 GB free, and a CI run died in the linker
# (2026-11-28). Nothing a build needs is lost: cargo relinks what is missing (the
# developer's checkout relinks its binaries after a CI run, in a minute or two).
# Usage: scripts/prune-target.sh [--dry-run]
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/env.sh
keep="${GUST_PRUNE_KEEP:-1}"
dry=""
[ "${1:-}" = "--dry-run" ] && dry=1
for deps in "$CARGO_TARGET_DIR"/release/deps "$CARGO_TARGET_DIR"/debug/deps; do
  [ -d "$deps" ] || continue
  python3 - "$deps" "$keep" "$dry" <<'PY'
import collections, os, re, sys
deps, keep, dry = sys.argv[1], int(sys.argv[2]), bool(sys.argv[3])
# The workspace's own outputs: test and bench binaries (NAME-HASH, executable) and
# the gust crates' libraries and metadata (libgust_*-HASH.rlib/.rmeta/.so, gust_*-HASH.d).
workspace = re.compile(r"^(lib)?gust[_-]")
groups = collections.defaultdict(list)
for f in os.listdir(deps):
    p = os.path.join(deps, f)
    m = re.match(r"^(.*)-([0-9a-f]{16})(\..*)?$", f)
    if not m or not os.path.isfile(p):
        continue
    name, ext = m.group(1), m.group(3) or ""
    test_binary = ext == "" and os.access(p, os.X_OK)
    if test_binary or workspace.match(name):
        groups[(name, ext)].append(p)
freed, count = 0, 0
for files in groups.values():
    files.sort(key=lambda p: os.stat(p).st_mtime, reverse=True)
    for p in files[keep:]:
        freed += os.stat(p).st_size
        count += 1
        if not dry:
            os.unlink(p)
verb = "would remove" if dry else "removed"
print(f"prune-target: {verb} {count} superseded file(s), {freed / 2**30:.1f} GiB, in {deps}", file=sys.stderr)
PY
done
