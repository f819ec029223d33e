"""The GPU images, built and checked for real (dlrepro.images.gpucheck):
each GPU profile whose base image is present here, against the matrix and
its labels. Several GB and minutes per image, so it runs outside the
per-commit CI, when a developer asks:

    DLREPRO_GPU_IMAGES=1 DLREPRO_BASE_OVERRIDES=... .venv/bin/pytest tests/runtimes/test_gpu_images.py

(or `invoke check-image`, which prints the same report). Without the
variable every case skips, saying how to run it."""
import os

import pytest

from dlrepro import matrix
from dlrepro.images import build as images, commands, gpucheck

PAIRS = gpucheck.gpu_targets(matrix.load())


@pytest.mark.parametrize("framework,profile", PAIRS,
                         ids=[f"{f}-{p}" for f, p in PAIRS])
def test_a_gpu_image_holds_what_the_matrix_says(framework, profile):
    if not os.environ.get("DLREPRO_GPU_IMAGES"):
        pytest.skip("GPU images are several GB each: set DLREPRO_GPU_IMAGES=1 "
                    "to build and check them")
    entry = matrix.load()[framework][profile]
    base = images.substituted_base(entry) or entry["base_image"]
    if images.local_image(images.engine(), base) is None:
        pytest.skip(f"base image {base} is not present here")
    reports, lines, _unchecked = commands.check_images(framework,
                                                       profile)
    assert len(reports) == 1, "\n".join(lines)
    assert gpucheck.differences(reports[0]) == [], "\n".join(lines)
