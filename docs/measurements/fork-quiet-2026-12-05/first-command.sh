#!/bin/bash
# The README's first command on this machine, from a fresh clone with empty
# uv and pip caches, then the same sweep under --isolation fork.
set -u
rm -rf "${FRESH:-/tmp/dlrepro-fresh}" && git clone -q "${REPO:?the checkout to clone}" "${FRESH:-/tmp/dlrepro-fresh}" && cd "${FRESH:-/tmp/dlrepro-fresh}" || exit 1
export UV_CACHE_DIR=$(mktemp -d /tmp/uvcache.XXXX) PIP_NO_CACHE_DIR=1
t0=$(date +%s.%N)
./setup.sh > /tmp/first-setup.log 2>&1
t1=$(date +%s.%N)
.venv/bin/invoke bench --all --suite smoke --runtime native --out /tmp/first/default > /tmp/first-bench.log 2>&1
rc=$?
t2=$(date +%s.%N)
echo "setup.sh $(echo "$t1 - $t0" | bc) s; invoke bench (with the environments) $(echo "$t2 - $t1" | bc) s; whole $(echo "$t2 - $t0" | bc) s; bench rc $rc"
.venv/bin/invoke report --out /tmp/first/default > /tmp/first-report-default.txt 2>&1
t3=$(date +%s.%N)
.venv/bin/invoke bench --all --suite smoke --runtime native --isolation fork --out /tmp/first/fork > /tmp/first-bench-fork.log 2>&1
t4=$(date +%s.%N)
echo "fork sweep (environments made) $(echo "$t4 - $t3" | bc) s"
.venv/bin/invoke report --out /tmp/first/fork > /tmp/first-report-fork.txt 2>&1
