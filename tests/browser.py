"""Headless Chromium for the HTML pages' tests: a page opened as a user's
browser would, its DOM and console, and what it drew (the report and the
history page)."""
import os
import re
import shutil
import subprocess

import pytest


def chromium():
    path = shutil.which("chromium")
    if path is None:
        reason = ("chromium is not installed (Debian: apt-get install "
                  "chromium; CI: .ci/chromium.sh)")
        if os.environ.get("DLREPRO_REQUIRE_CHROMIUM"):
            pytest.fail(f"DLREPRO_REQUIRE_CHROMIUM is set but {reason}")
        pytest.skip(reason)
    return path


def headless(page, profile, *args):
    """Run headless Chromium on `page`: (stdout, console lines)."""
    proc = subprocess.run(
        [chromium(), "--headless=new", "--no-sandbox", "--disable-gpu",
         "--hide-scrollbars", "--no-first-run", f"--user-data-dir={profile}",
         "--enable-logging=stderr", "--v=0", "--virtual-time-budget=10000",
         *args, page.as_uri()],
        capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    console = [line for line in proc.stderr.splitlines()
               if ":CONSOLE" in line]
    return proc.stdout, console


def drawn(dom):
    body = re.search(r"<body([^>]*)>", dom).group(1)
    figures = re.search(r'data-figures="(\d+)/(\d+)"', body)
    height = re.search(r'data-height="(\d+)"', body)
    assert figures and height, body
    return int(figures.group(1)), int(figures.group(2)), int(height.group(1))
