"""Shared fixtures. Framework tests run in the framework's own venv
(.venvs/<framework>-cpu), created on demand from the same lock file the
CPU image uses, so the host environment never imports a framework."""
import gc
import json
import sys

import pytest

import processes
from paths import ROOT

sys.path.insert(0, str(ROOT))

# Fixtures every module may ask for by name, without importing them
# (dockerenv first: the others import it, and a plugin is rewritten for
# pytest's asserts only when it is first imported as one).
pytest_plugins = ["dockerenv", "_frameworks", "disks", "memcgroup",
                  "runtimeenv", "slurmenv", "slurmnodes"]


@pytest.fixture(scope="session")
def root():
    return ROOT


@pytest.fixture(scope="session")
def schema():
    """The result file's JSON Schema."""
    return json.loads((ROOT / "harness" / "result.schema.json").read_text())


# A valid cell: one-thread CPU PyTorch training fcn-r on synthetic data.
CELL = {"framework": "pytorch", "profile": "cpu", "network": "fcn-r",
        "dataset": "synthetic", "batch_size": 8, "global_batch_size": 8,
        "device": "cpu", "gpus": 0, "threads": 1, "iterations": 4,
        "warmup": 2, "runtime": "native", "seed": 0,
        "clock_policy": "observe"}


@pytest.fixture(scope="session")
def make_cell():
    """make_cell(base=None, **overrides) -> a new cell: CELL, then the
    fields of `base` (a module's own cell), then `overrides`."""
    def make(base=None, **overrides):
        cell = dict(CELL)
        cell.update(base or {})
        cell.update(overrides)
        return cell
    return make


@pytest.fixture(autouse=True)
def thaw_collector():
    """A cell run in this process freezes what is alive at its warm-up
    (harness.collector): here the test run's own objects, which later
    tests' garbage would otherwise keep company."""
    yield
    gc.unfreeze()


@pytest.fixture(autouse=True)
def no_process_outlives_its_test():
    """What a test started with processes.start and left running (it
    failed, or stopped waiting) is killed here, as in a `finally`: a
    forgotten harness would slow every test after it."""
    marked = processes.mark()
    try:
        yield
    finally:
        processes.end_since(marked)
