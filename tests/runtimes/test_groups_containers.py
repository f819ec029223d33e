"""--isolation group in containers, on the real command line: `invoke bench
--runtime docker|podman|charliecloud --isolation group` runs a group's
cells in one container (one harness worker), each cell its own result; a
cell past its timeout stops that container and the rest of the group goes
on in a fresh one; Ctrl-C stops the container; no container outlives the
run. The real harness in the Docker tests' MXNet CPU image (the smallest;
tests/runtimeenv.py), tiny cells."""
import os
import signal
import subprocess

import pytest

from dlrepro.run import store
from paths import ROOT
from runtimeenv import (binary_or_skip, cli_env, docker_image, left_behind,
                        ready, three_cells_argv, three_cells_at_fcn_r,
                        three_cells_fcn_r_timed_out, three_cells_job_id)

@pytest.fixture(params=["docker", "podman", "charliecloud"])
def runtime(request):
    return ready(request)


def bench_argv(runtime, tmp_path, timeout_s):
    return three_cells_argv(runtime, tmp_path / "suite.toml",
                            tmp_path / "runs", "group", timeout_s,
                            endless=True)


job_id = three_cells_job_id


def placed(run_dir, network):
    """(status, position in its worker's group, the cells before it there)
    of a cell's result."""
    result = store.load_result(run_dir / f"{job_id(network)}.json")
    isolation = result.get("isolation") or {}
    return (result["status"], isolation.get("position"),
            isolation.get("cells_before"))


def statuses(run_dir):
    return {entry["id"]: entry["status"]
            for entry in store.read_run(run_dir)["jobs"]}


def test_a_group_shares_one_container_and_a_timeout_goes_on_in_a_fresh_one(
        runtime, tmp_path):
    run_dir = three_cells_fcn_r_timed_out(
        bench_argv(runtime, tmp_path, timeout_s=10), tmp_path / "runs")
    # lstm32 and fcn-r in one worker (so one container), each its own result
    assert placed(run_dir, "lstm32") == ("ok", 1, [])
    assert placed(run_dir, "fcn-r")[1:] == (2, [job_id("lstm32")])
    # the timeout stopped that container; lstm64 began a fresh one
    assert placed(run_dir, "lstm64") == ("ok", 1, [])
    assert store.read_run(run_dir)["isolation"] == "group"
    assert not left_behind(runtime, run_dir)


def sweep_at_fcn_r(runtime, tmp_path, timeout_s):
    """(the sweep, its run folder) once fcn-r, the group's second cell, is
    timing in the worker that timed lstm32."""
    return three_cells_at_fcn_r(
        bench_argv(runtime, tmp_path, timeout_s=timeout_s), tmp_path / "runs")


def test_ctrl_c_stops_the_groups_container_and_leaves_none(runtime,
                                                           tmp_path):
    proc, run_dir = sweep_at_fcn_r(runtime, tmp_path, timeout_s=900)
    os.killpg(proc.pid, signal.SIGINT)  # what Ctrl-C sends
    _out, err = proc.communicate(timeout=180)
    assert proc.returncode == 130, err
    assert "kept 1 finished job(s)" in err and "Traceback" not in err
    stopped = store.load_result(run_dir / f"{job_id('fcn-r')}.json")
    assert stopped["error"]["type"] == "Terminated"
    assert stopped["isolation"]["position"] == 2
    assert not left_behind(runtime, run_dir)


@pytest.mark.parametrize("container_runtime", ["docker", "podman"])
def test_a_kill_of_the_sweep_leaves_no_container_after_resume(
        container_runtime, tmp_path):
    """kill -9 of `invoke bench` ends its worker (the container's client
    hears of its parent's death) but cannot remove the group's container,
    named after a job that --resume does not run again: the resumed run
    removes it."""
    if container_runtime == "podman":
        binary_or_skip("podman")
    docker_image()
    # fcn-r's 20 s: ample to kill the sweep at its first timed iteration,
    # and the resumed fcn-r ends by it
    argv = bench_argv(container_runtime, tmp_path, timeout_s=20)
    proc, run_dir = sweep_at_fcn_r(container_runtime, tmp_path,
                                   timeout_s=20)
    os.kill(proc.pid, signal.SIGKILL)
    proc.communicate(timeout=60)
    assert left_behind(container_runtime, run_dir)

    again = subprocess.run(argv + ["--resume"], cwd=ROOT, env=cli_env(),
                           capture_output=True, text=True, timeout=900)
    assert again.returncode == 0, again.stderr
    assert statuses(run_dir) == {job_id("lstm32"): "ok",
                                 job_id("fcn-r"): "timeout",
                                 job_id("lstm64"): "ok"}, again.stderr
    assert not left_behind(container_runtime, run_dir)
