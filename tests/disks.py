"""A disk that fills up, for the tests of a full disk."""
import os
import subprocess

import pytest


@pytest.fixture
def small_disk(tmp_path):
    """A real filesystem that fills up: a 4 MiB tmpfs (needs root)."""
    mount = tmp_path / "disk"
    mount.mkdir()
    proc = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs",
                           str(mount)], capture_output=True, text=True)
    if proc.returncode != 0:
        if os.environ.get("CI"):
            pytest.fail(f"cannot mount a tmpfs in CI: {proc.stderr}")
        pytest.skip(f"cannot mount a tmpfs here: {proc.stderr.strip()}")
    yield mount
    subprocess.run(["umount", "-l", str(mount)], check=False)


def fill(folder):
    """Write into `folder` until its disk is full."""
    with open(folder / "filler", "wb") as handle:
        try:
            while True:
                handle.write(b"\0" * 65536)
                handle.flush()
        except OSError:
            pass
