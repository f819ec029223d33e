"""What the Docker tests share: the engine, the debootstrap base images that
.ci/base-image.sh imports (Debian bookworm with Python 3.11 for
python:3.11-slim, Ubuntu 18.04 for ubuntu:18.04), and the CPU images built
FROM them.

Tests that need the engine fail when it is absent and DLREPRO_REQUIRE_DOCKER
is set (CI sets it: .ci/run installs and starts the engine first); without
the variable they skip, saying what to run.
"""
import os

import pytest

from dlrepro import matrix
from dlrepro.images import build as images
from dlrepro.errors import UserError

BASE_IMAGE = os.environ.get("DLREPRO_TEST_BASE_IMAGE",
                            "dlrepro-docker-test/bookworm-python3:minbase")
BIONIC_IMAGE = os.environ.get("DLREPRO_TEST_BIONIC_IMAGE",
                              "dlrepro-docker-test/bionic:minbase")
# Images the tests build are named apart from a user's dlrepro/* images.
PREFIX = "dlrepro-docker-test"
CPU_FRAMEWORKS = ("pytorch", "tensorflow", "mxnet", "jax")
PYTHON_SLIM = "python:3.11.9-slim-bookworm"
UBUNTU_1804 = "ubuntu:18.04"
# The one base substitution setting (DLREPRO_BASE_OVERRIDES), read alike by
# `invoke build`, `bench --runtime docker`, `save` and `render`: every CPU
# image builds FROM the stand-ins, under the tags the fixtures below build.
BASE_OVERRIDES = f"{PYTHON_SLIM}={BASE_IMAGE},{UBUNTU_1804}={BIONIC_IMAGE}"


def _unavailable(reason):
    if os.environ.get("DLREPRO_REQUIRE_DOCKER"):
        pytest.fail(f"DLREPRO_REQUIRE_DOCKER is set but {reason}")
    pytest.skip(reason)


def engine_or_skip():
    try:
        return images.engine()
    except UserError as exc:
        _unavailable(f"no Docker engine: {exc} (run .ci/docker-engine.sh)")


def base_or_skip(client, ref=BASE_IMAGE):
    if images.local_image(client, ref) is None:
        _unavailable(f"test base image {ref} is missing "
                     f"(run .ci/base-image.sh)")
    return ref


@pytest.fixture(scope="session")
def docker_client():
    return engine_or_skip()


@pytest.fixture(scope="session")
def test_base(docker_client):
    return base_or_skip(docker_client)


@pytest.fixture(scope="session")
def cpu_images(docker_client, test_base):
    """{framework: tag} of the CPU images, built from wheelhouses (a no-op
    when they exist: the tag is the recipe's hash)."""
    m = matrix.load()
    return {framework: images.ensure(framework, "cpu", m, base_image=test_base,
                                     client=docker_client, name_prefix=PREFIX)
            for framework in CPU_FRAMEWORKS}


_BIONIC_IMAGES = {}


def bionic_image_or_skip(framework):
    """The tag of `framework`'s cpu image FROM the Ubuntu 18.04 stand-in
    (CNTK, Caffe), built when missing (a no-op when it exists): once per
    test session, whichever test asks first."""
    if framework not in _BIONIC_IMAGES:
        client = engine_or_skip()
        base = base_or_skip(client, BIONIC_IMAGE)
        _BIONIC_IMAGES[framework] = images.ensure(
            framework, "cpu", matrix.load(), base_image=base, client=client,
            name_prefix=PREFIX, log=lambda _m: None)
    return _BIONIC_IMAGES[framework]


def cntk_image_or_skip():
    """The tag of the cntk.cpu image FROM the Ubuntu 18.04 stand-in, built
    from its wheelhouse when missing (a no-op when it exists)."""
    return bionic_image_or_skip("cntk")


def caffe_image_or_skip():
    """The tag of the caffe.cpu image FROM the Ubuntu 18.04 stand-in (its
    apt closure comes from the Ubuntu archive: the build needs the network
    once; later runs find the tag)."""
    return bionic_image_or_skip("caffe")


@pytest.fixture(scope="session")
def cntk_image():
    return cntk_image_or_skip()


@pytest.fixture(scope="session")
def caffe_image():
    return caffe_image_or_skip()
