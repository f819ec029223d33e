"""A test that needs what this machine lacks: skipped, saying which script
in .ci/ provides it, or failed where CI says it must be there."""
import os

import pytest


def missing(reason, script, required_by):
    """Skip for want of what `script` sets up; fail instead where the
    environment variable `required_by` is set (CI sets it)."""
    reason += f"; run {script}"
    if os.environ.get(required_by):
        pytest.fail(f"{required_by} is set but {reason}")
    pytest.skip(reason)
