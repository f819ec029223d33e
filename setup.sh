#!/usr/bin/env bash
# Creates (or refreshes) .venv, the host environment, from the hash-pinned
# requirements/host.txt. Idempotent: a second run with nothing changed only
# checks. Framework environments are made on demand by `invoke env`/`bench`.
set -euo pipefail
cd "$(dirname "$0")"
python=${PYTHON:-python3}
if ! "$python" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
    echo "setup.sh: Python 3.11 or newer is needed for the host tools; set PYTHON=/path/to/python3.11" >&2
    exit 2
fi
stamp=.venv/.installed-$(sha256sum requirements/host.txt | cut -c1-16)
if [ ! -e "$stamp" ]; then
    rm -rf .venv
    "$python" -m venv .venv
    # uv first, installed by pip from the lock's own uv entry (its hash
    # checked); then uv installs the whole lock, as it makes the framework
    # environments (dlrepro/images/uvinstall.py). grep drops the noise of
    # pip configurations with missing local indexes.
    awk '/^uv==/ { entry = 1 } entry { print } entry && !/\\$/ { exit }' \
        requirements/host.txt > .venv/uv-lock.txt
    if [ ! -s .venv/uv-lock.txt ]; then
        echo "setup.sh: requirements/host.txt pins no uv (invoke pin --host)" >&2
        exit 2
    fi
    .venv/bin/pip install --quiet --disable-pip-version-check --no-deps \
        --require-hashes -r .venv/uv-lock.txt 2>&1 \
        | { grep -v 'is neither a file nor a directory' || true; }
    .venv/bin/python -m dlrepro.images.uvinstall .venv/bin/python \
        requirements/host.txt
    touch "$stamp"
fi
