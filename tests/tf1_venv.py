"""A TensorFlow 1.15 environment for tests, where a Python 3.7 exists.

TensorFlow 1.15 (the `tf1` profile's framework) has wheels for Python 3.7
and older only. Where such an interpreter is on the machine (on PATH, or
installed by pyenv), tests make .venvs/tensorflow-1.15-test from the
hash-pinned tests/locks/tensorflow-1.15-cpu.txt and run the TensorFlow
backend there; elsewhere they are skipped, saying why.
"""
import glob
import hashlib
import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
LOCK = ROOT / "tests" / "locks" / "tensorflow-1.15-cpu.txt"
VENV = ROOT / ".venvs" / "tensorflow-1.15-test"


def _works(python):
    try:
        proc = subprocess.run([python, "-c", "import sys, venv; "
                               "print('%d.%d' % sys.version_info[:2])"],
                              capture_output=True, text=True, timeout=60)
    except OSError:
        return False
    return proc.returncode == 0 and proc.stdout.strip() == "3.7"


def find_python37():
    """A working Python 3.7, or None. PATH first; a pyenv shim on PATH may
    exist without the version behind it, so each candidate is run."""
    candidates = [shutil.which("python3.7")]
    pyenv_root = os.environ.get("PYENV_ROOT", os.path.expanduser("~/.pyenv"))
    candidates += sorted(glob.glob(os.path.join(pyenv_root, "versions",
                                                "3.7*", "bin", "python3.7")),
                         reverse=True)
    for python in candidates:
        if python and _works(python):
            return python
    return None


def python():
    """The environment's python, made or refreshed from the lock; skips the
    calling test when no Python 3.7 can be found."""
    base = find_python37()
    if base is None:
        pytest.skip("TensorFlow 1.15 needs Python 3.7, and none is on this "
                    "machine (PATH or pyenv)")
    stamp = VENV / ".lock-{}".format(
        hashlib.sha256(LOCK.read_bytes()).hexdigest()[:16])
    target = VENV / "bin" / "python"
    if stamp.exists() and target.exists():
        return target
    shutil.rmtree(VENV, ignore_errors=True)
    subprocess.run([base, "-m", "venv", str(VENV)], check=True,
                   capture_output=True)
    proc = subprocess.run([str(target), "-m", "pip", "install", "--quiet",
                           "--disable-pip-version-check", "--no-deps",
                           "--require-hashes", "-r", str(LOCK)],
                          capture_output=True, text=True)
    assert proc.returncode == 0, "installing {} failed: {}".format(
        LOCK.name, proc.stderr[-2000:])
    stamp.touch()
    return target
