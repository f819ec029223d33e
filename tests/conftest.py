"""Shared fixtures. Framework tests run in the framework's own venv
(.venvs/<framework>-cpu), created on demand from the same lock file the
CPU image uses, so the host environment never imports a framework."""
import functools
import json
import os
import re
import sys
from pathlib import Path

import pytest

import processes
from paths import ROOT

sys.path.insert(0, str(ROOT))

# Fixtures every module may ask for by name, without importing them
# (dockerenv first: the others import it, and a plugin is rewritten for
# pytest's asserts only when it is first imported as one).
pytest_plugins = ["dockerenv", "_frameworks", "disks", "memcgroup",
                  "runtimeenv", "slurmenv", "slurmnodes"]


# `invoke test` runs the tests in two processes (pytest-xdist): on this
# project's 2-core machines most tests wait on one core for a framework, a
# container or a Slurm job. Each test file stays in one process, so its
# module fixtures are made once. Files that drive what the machine has only
# one of share a process and run one after another, found by the helpers
# they import or the fixtures they name: the Slurm clusters (a node set
# down, a job past its time limit, one node's CPUs), the container
# runtimes' stores (Charliecloud's one conversion of the test image, made
# by whichever module comes first; Podman's copy), and the Docker engine's
# list of images (a build leaves no dangling image).
MACHINE_WIDE_FILES = {"test_images", "test_docker_runtime_cli"}
_MACHINE_WIDE = re.compile(
    r"^(?:import|from) (?:slurmenv|slurmnodes|runtimeenv)\b"
    r"|\bslurm_(?:cluster|nodes)\b", re.M)


@functools.lru_cache(maxsize=None)
def group_of(path):
    """The group of a test file (its path under the repository): "machine"
    where it drives machine-wide state, else the file's own name."""
    name = Path(path).stem
    if name in MACHINE_WIDE_FILES or _MACHINE_WIDE.search(
            (ROOT / path).read_text()):
        return "machine"
    return name


# xdist's own --dist loadgroup reads marks that it writes into a test's id
# by a field pytest 9 no longer has, so its groups are silently ignored;
# the scheduler below is xdist's by-file one with the grouping above
# (tryfirst: before xdist's own choice of scheduler).
@pytest.hookimpl(optionalhook=True, tryfirst=True)
def pytest_xdist_make_scheduler(config, log):
    from xdist.scheduler import LoadFileScheduling

    class ByFileMachineWideTogether(LoadFileScheduling):
        def _split_scope(self, nodeid):
            return group_of(nodeid.split("::", 1)[0])

    if config.getvalue("dist") not in ("load", "loadfile", "loadgroup"):
        return None
    return ByFileMachineWideTogether(config, log)


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


@pytest.fixture(scope="session", autouse=True)
def pytorch_cache_in_the_test_run(tmp_path_factory):
    """Importing torch._dynamo (every torch.optim step does) makes PyTorch's
    compile cache, $TMPDIR/torchinductor_<user>. A cell of dlrepro's makes
    it in its own temp dir, removed after; the tests that run a framework's
    interpreter themselves would leave it in the machine's /tmp."""
    os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR",
                          str(tmp_path_factory.mktemp("torchinductor")))


@pytest.fixture(autouse=True)
def thaw_collector():
    """A cell run in this process freezes what is alive at its warm-up
    (harness.collector): here the test run's own objects, which later
    tests' garbage would otherwise keep company."""
    from harness import collector
    yield
    collector.thaw()


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
