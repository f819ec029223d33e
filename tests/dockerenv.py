"""What the Docker tests share: the engine, the debootstrap base image that
.ci/base-image.sh imports, and the CPU images built FROM it.

Tests that need the engine fail when it is absent and DLREPRO_REQUIRE_DOCKER
is set (CI sets it: .ci/run installs and starts the engine first); without
the variable they skip, saying what to run.
"""
import os

import pytest

from dlrepro import images, matrix
from dlrepro.errors import UserError

BASE_IMAGE = os.environ.get("DLREPRO_TEST_BASE_IMAGE",
                            "dlrepro-docker-test/bookworm-python3:minbase")
# Images the tests build are named apart from a user's dlrepro/* images.
PREFIX = "dlrepro-docker-test"
CPU_FRAMEWORKS = ("pytorch", "tensorflow", "mxnet")
PYTHON_SLIM = "python:3.11.9-slim-bookworm"


def _unavailable(reason):
    if os.environ.get("DLREPRO_REQUIRE_DOCKER"):
        pytest.fail(f"DLREPRO_REQUIRE_DOCKER is set but {reason}")
    pytest.skip(reason)


def engine_or_skip():
    try:
        return images.engine()
    except UserError as exc:
        _unavailable(f"no Docker engine: {exc} (run .ci/docker-engine.sh)")


def base_or_skip(client):
    if images._local_image(client, BASE_IMAGE) is None:
        _unavailable(f"test base image {BASE_IMAGE} is missing "
                     f"(run .ci/base-image.sh)")
    return BASE_IMAGE


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
