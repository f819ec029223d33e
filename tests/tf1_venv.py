"""A TensorFlow 1.15 environment for tests, where a Python 3.7 exists.

TensorFlow 1.15 (the `tf1` profile's framework) has wheels for Python 3.7
and older only. Where such an interpreter is on the machine (on PATH, or
installed by pyenv), tests make .venvs/tensorflow-1.15-test from the
hash-pinned tests/locks/tensorflow-1.15-cpu.txt and run the TensorFlow
backend there; elsewhere they are skipped, saying why.
"""
import hashlib
import shutil
import subprocess

import pytest

from dlrepro.images import envs
from paths import ROOT

LOCK = ROOT / "tests" / "locks" / "tensorflow-1.15-cpu.txt"
VENV = ROOT / ".venvs" / "tensorflow-1.15-test"


def find_python37():
    """A working Python 3.7 (PATH or pyenv), or None."""
    return envs.python_for("3.7")


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
    with envs.made_alone(VENV):  # two test processes may both want it
        if not (stamp.exists() and target.exists()):
            _make(base, stamp, target)
    return target


def _make(base, stamp, target):
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
