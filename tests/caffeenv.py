"""An interpreter with Caffe for tests: the Python of the caffe.cpu image.

Caffe 1.0 comes from Ubuntu 18.04's packages (pycaffe on Python 3.6), which
no current host has; its image has them. Like tests/cntkenv.py (whose
launcher this reuses), `python()` is the image's Python run as if it were a
native one, so tests that run framework code as `[python, args...]` (the
identity, backend and convergence tests) run Caffe's unchanged.
DLREPRO_CAFFE_PYTHON names another interpreter with pycaffe instead.

Without an engine or the Ubuntu 18.04 base image the calling test skips,
saying what to run; with DLREPRO_REQUIRE_DOCKER set (CI) it fails.
"""
from cntkenv import image_python
from dockerenv import caffe_image_or_skip

ENV_OVERRIDE = "DLREPRO_CAFFE_PYTHON"


def python():
    """A path to run Caffe's Python with (skips the calling test, or fails
    it in CI, when the image cannot be had)."""
    return image_python("caffe", caffe_image_or_skip, ENV_OVERRIDE)
