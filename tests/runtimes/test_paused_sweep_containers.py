"""A docker sweep paused (SIGSTOP and SIGCONT to `invoke bench`, as Ctrl-Z
then `fg`) for longer than a cell's timeout while its cell goes on in its
container and ends: the cell is `ok` with its whole result, not rewritten
as a timeout (issue 42, item 2; natively: test_paused_sweep.py). The real
harness in the Docker tests' MXNet CPU image, two small cells."""
import subprocess

import pytest

import processes
import suitefile
from dlrepro.run import store
from paths import INVOKE, ROOT
from interrupts import paused_past_the_timeout
from runtimeenv import (FRAMEWORK, cli_env, docker_image, run_folder_of,
                        three_cells_job_id as job_id)

# Enough for a container's start and MXNet's import on a loaded machine.
TIMEOUT_S = 60
SUITE = {"name": "paused-containers",
         "description": "two small cells, long enough to be paused mid-cell",
         "device": "cpu", "iterations": 50, "warmup": 1}


@pytest.mark.parametrize("isolation", ["group", "cell"])
def test_a_cell_that_ended_during_a_pause_is_ok_not_a_timeout(isolation,
                                                              tmp_path):
    docker_image()
    suite = suitefile.write(tmp_path / "suite.toml", [
        {"networks": ["lstm32", "lstm64"], "batch_sizes": [8]}], **SUITE)
    proc = processes.start(
        [INVOKE, "bench", "--suite", suite, "--framework", FRAMEWORK,
         "--runtime", "docker", "--threads", "1", "--isolation", isolation,
         "--timeout", str(TIMEOUT_S), "--out", str(tmp_path / "runs")],
        cwd=ROOT, env=cli_env(), stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True, start_new_session=True)
    run_dir = run_folder_of(proc, tmp_path / "runs")
    paused_past_the_timeout(proc, run_dir, TIMEOUT_S)
    _out, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, err
    for network in ("lstm32", "lstm64"):
        found = store.load_result(run_dir / f"{job_id(network)}.json")
        assert found["status"] == "ok", (network, found["error"], err)
        assert len(found["timing"]["per_iteration_s"]) == 50
