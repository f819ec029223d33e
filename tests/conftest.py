"""Shared fixtures. Framework tests run in the framework's own venv
(.venvs/<framework>-cpu), created on demand from the same lock file the
CPU image uses, so the host environment never imports a framework."""
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


@pytest.fixture(scope="session")
def root():
    return ROOT
