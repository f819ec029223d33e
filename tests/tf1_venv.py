"""A TensorFlow 1.15 environment for tests, where a Python 3.7 exists.

TensorFlow 1.15 (the `tf1` profile's framework) has wheels for Python 3.7
and older only. Where such an interpreter is on the machine (on PATH, or
installed by pyenv), tests make .venvs/tensorflow-1.15-test from the
hash-pinned tests/locks/tensorflow-1.15-cpu.txt and run the TensorFlow
backend there; elsewhere they are skipped, saying why.
"""
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
    if find_python37() is None:
        pytest.skip("TensorFlow 1.15 needs Python 3.7, and none is on this "
                    "machine (PATH or pyenv)")
    return envs.from_lock(LOCK, VENV, "3.7", log=lambda _m: None)
