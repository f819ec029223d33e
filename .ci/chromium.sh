#!/usr/bin/env bash
# Makes sure Debian's chromium is installed: tests/results/test_html_report.py
# renders the HTML report in it, headless. Installs only chromium (no
# recommended packages) when it is missing; idempotent. On a fresh machine
# this fetched 124 MB (25 packages) and took about 13 s, apt-get update
# included.
set -euo pipefail
if command -v chromium >/dev/null; then
    echo "chromium.sh: $(chromium --version 2>/dev/null) present"
    exit 0
fi
. "$(dirname "$0")/apt.sh"
started=$(date +%s)
apt_install chromium
echo "chromium.sh: installed $(chromium --version 2>/dev/null) in" \
     "$(( $(date +%s) - started )) s"
