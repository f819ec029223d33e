"""Fixtures every in-process test of harness.worker needs (import them by
name into the module: pytest then applies the autouse ones there)."""
import pytest


@pytest.fixture(autouse=True)
def restore_thread_variables(monkeypatch):
    # run_cell sets the thread variables of this process: restore them after.
    from harness.threads import THREAD_ENV_VARS
    for name in THREAD_ENV_VARS:
        monkeypatch.delenv(name, raising=False)
