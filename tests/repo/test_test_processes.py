"""`invoke test` spreads test files over two processes; the files that
drive machine-wide state (the Slurm clusters, the Docker engine's image
list) share one (tests/conftest.py)."""
import os
import re
import subprocess
import sys

import conftest
from paths import ROOT

SLURM_FILES = ["tests/slurm/test_slurm_results.py", "tests/slurm/test_slurm_limits.py",
               "tests/slurm/test_slurm_groups.py"]


def test_files_that_drive_the_machine_are_one_group():
    for path in SLURM_FILES + ["tests/runs/test_engines.py",  # imports slurmenv
                               "tests/slurm/test_slurm_multinode.py",  # nodes
                               "tests/runtimes/test_images.py",
                               "tests/runtimes/test_charliecloud_runtime.py"]:
        assert conftest.group_of(path) == "machine", path
    # Its own group: it names Slurm but starts no job.
    assert conftest.group_of("tests/slurm/test_slurm_options.py") == \
        "test_slurm_options"
    assert conftest.group_of("tests/backends/test_identity.py") == "test_identity"


def test_two_processes_keep_the_slurm_files_in_one(tmp_path):
    # No cluster for these (an `sinfo` that finds none): each Slurm test
    # skips at once, in the process it was given, which the verbose report
    # names.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "sinfo").write_text("#!/bin/sh\necho 'no cluster' >&2\nexit 1\n")
    (bin_dir / "sinfo").chmod(0o755)
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("DLREPRO_REQUIRE")}
    env["PATH"] = f"{bin_dir}{os.pathsep}{env['PATH']}"
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-n", "2", "--dist", "loadfile",
         "-v", "-p", "no:cacheprovider", "--basetemp", str(tmp_path / "t"),
         *SLURM_FILES, "tests/slurm/test_slurm_options.py"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    workers = {}
    for worker, path in re.findall(r"^\[(gw\d)\] .*?(tests/\w+/test_\w+\.py)::",
                                   proc.stdout, re.M):
        workers.setdefault(path, set()).add(worker)
    assert {w for f in SLURM_FILES for w in workers[f]} in ({"gw0"},
                                                            {"gw1"}), workers
    assert set().union(*workers.values()) == {"gw0", "gw1"}, workers
