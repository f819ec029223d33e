#!/bin/bash
# The README's first command from fresh clones of two checkouts, one after
# the other: after, before, before, after (first_command.sh of
# ../first-command-2026-12-05 for each run).
#   AFTER=/path/to/checkout BEFORE=/path/to/other bash first-command-ab.sh
set -u
here=$(cd "$(dirname "$0")" && pwd)
for side in after before before after; do
    if [ "$side" = after ]; then repo=${AFTER:?}; else repo=${BEFORE:?}; fi
    echo "== $side $(date +%T) load $(cut -d' ' -f1 /proc/loadavg)"
    REPO=$repo bash "$here/../first-command-2026-12-05/first_command.sh"
done
