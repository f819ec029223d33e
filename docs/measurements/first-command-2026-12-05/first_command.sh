#!/bin/bash
# The README's first command on this machine, from a fresh clone of REPO
# with empty uv and pip caches, each framework in its default mode; then the
# sweep's measured fraction (../fork-quiet-2026-12-05/sweep_fraction.py).
#   REPO=/path/to/a/checkout bash first_command.sh
set -u
here=$(cd "$(dirname "$0")" && pwd)
fresh=$(mktemp -d /tmp/fresh.XXXX) out=$(mktemp -d /tmp/first.XXXX)
git clone -q "${REPO:?set REPO to a checkout}" "$fresh/repo" && cd "$fresh/repo" || exit 1
export UV_CACHE_DIR=$(mktemp -d /tmp/uvcache.XXXX) PIP_NO_CACHE_DIR=1
t0=$(date +%s.%N)
./setup.sh > "$out/setup.log" 2>&1
t1=$(date +%s.%N)
.venv/bin/invoke bench --all --suite smoke --runtime native --out "$out" > "$out/bench.log" 2>&1
rc=$?
t2=$(date +%s.%N)
echo "setup.sh $(echo "$t1 - $t0" | bc) s; invoke bench (with the environments) $(echo "$t2 - $t1" | bc) s; whole $(echo "$t2 - $t0" | bc) s; bench rc $rc"
.venv/bin/invoke report --out "$out" > "$out/report.txt" 2>&1
python3 "$here/../fork-quiet-2026-12-05/sweep_fraction.py" "$out/latest"
rm -rf "$UV_CACHE_DIR"
