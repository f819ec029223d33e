"""What the backend tests probe: each framework's CPU environment, plus
TensorFlow 1.15, and the Python that runs each (its native venv, made on
demand from the CPU image's lock, or its image's Python for the two
frameworks that have no native environment)."""
import os

import pytest

import caffeenv
import cntkenv
import tf1_venv
from dlrepro import matrix
from dlrepro.images import envs
from harness import frameworks
from paths import ROOT

VARIANTS = dict([(f, f) for f in frameworks.NAMES] + [("tensorflow-1.15",
                                                        "tensorflow")])
# Frameworks with no native environment, run in their image's Python.
IMAGE_ONLY = ("cntk", "caffe")


def backend_file(framework):
    return ROOT / "harness" / "frameworks" / framework / "backend.py"


_PYTHONS = {}


def framework_python(variant):
    """The variant's venv python, or pytest.skip with the reason."""
    if variant in _PYTHONS:
        return _PYTHONS[variant]
    framework = VARIANTS[variant]
    if not backend_file(framework).exists():
        pytest.skip("{} backend not written yet: {} does not exist".format(
            framework, backend_file(framework).relative_to(ROOT)))
    if framework == "cntk":
        # Image only: its Python, run as if it were native.
        _PYTHONS[variant] = cntkenv.python()
        return _PYTHONS[variant]
    if framework == "caffe":
        _PYTHONS[variant] = caffeenv.python()
        return _PYTHONS[variant]
    m = matrix.load()
    entry = matrix.entry(m, framework, "cpu")
    reason = envs.unavailable_reason(entry, framework, "cpu")
    if reason is not None:
        pytest.skip("not runnable here: {}".format(reason))
    if variant == "tensorflow-1.15":
        _PYTHONS[variant] = tf1_venv.python()
    else:
        _PYTHONS[variant] = envs.ensure(framework, "cpu", entry,
                                        log=lambda *_: None)
    return _PYTHONS[variant]


def framework_env():
    return dict(os.environ, PYTHONPATH=str(ROOT), TF_CPP_MIN_LOG_LEVEL="2")
