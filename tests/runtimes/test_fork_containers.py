"""--isolation fork in containers, on the real command line: `invoke bench
--runtime docker|podman|charliecloud --isolation fork` runs a process
key's cells as children forked by one fork server, the container's
process (one container per key), each child's result on the host as in
cell mode; a child killed mid-cell (kill -9) is that cell alone, and
--resume measures it and nothing twice; Ctrl-C stops the container. The
real harness in the Docker tests' MXNet CPU image (tests/runtimeenv.py),
tiny cells."""
import os
import signal
import subprocess
from pathlib import Path

import pytest

import dockercells
import processes
from dlrepro.run import store
from dlrepro.run.runtimes import docker as docker_runtime
from dockerenv import PREFIX
from paths import ROOT
from runtimeenv import (FRAMEWORK, THREE_CELLS, cli_env, docker_image, ready,
                        three_cells_argv, three_cells_at_fcn_r,
                        three_cells_fcn_r_timed_out, three_cells_job_id)

NETWORKS = tuple(THREE_CELLS)
# What differs between two runs of a cell whatever the mode: times, the
# process and the host (a container's name), the run; the rest (the cell,
# its model, its losses, the environment) must be equal.
TIMED = ("timing", "phases", "compilation", "started_at", "finished_at",
         "run_id", "isolation", "warnings")


@pytest.fixture(params=["docker", "podman", "charliecloud"])
def runtime(request):
    return ready(request)


def bench_argv(runtime, out, isolation="fork", timeout_s=600,
               endless=False):
    suite = Path(out).parent / f"{Path(out).name}.toml"
    return three_cells_argv(runtime, suite, out, isolation, timeout_s,
                            endless)


job_id = three_cells_job_id


def result(run_dir, network):
    return store.load_result(run_dir / f"{job_id(network)}.json")


def forked(run_dir, network):
    """(status, mode, position among its server's children, server pid,
    child pid) of a cell."""
    found = result(run_dir, network)
    isolation = found.get("isolation") or {}
    return (found["status"], isolation.get("mode"),
            isolation.get("position"), isolation.get("worker_pid"),
            isolation.get("pid"))


def statuses(run_dir):
    return {entry["id"]: entry["status"]
            for entry in store.read_run(run_dir)["jobs"]}


def untimed(found):
    """A result less what differs between two runs of its cell."""
    kept = {key: value for key, value in found.items() if key not in TIMED}
    kept["model"] = {key: value for key, value in found["model"].items()
                     if not key.startswith("achieved")}
    kept["environment"] = {
        key: value for key, value in found["environment"].items()
        if key not in ("host", "python_gc")}
    return kept


def containers(runtime, run_dir):
    """The run's containers (docker, podman) still there; charliecloud
    makes none."""
    if runtime not in ("docker", "podman"):
        return []
    proc = subprocess.run([runtime, "ps", "-a", "--filter",
                           f"name={run_dir.name}", "--format",
                           "{{.Names}}"], capture_output=True, text=True,
                          check=True)
    return proc.stdout.split()


def server_here(runtime, run_dir):
    """The fork server's pid on this host: the child of the container's
    first process (docker's and podman's --init); under charliecloud (no
    PID namespace) the pid its first cell recorded."""
    if runtime == "charliecloud":
        return forked(run_dir, "lstm32")[3]
    name = docker_runtime.worker_container_name(run_dir, job_id("lstm32"))
    proc = subprocess.run([runtime, "inspect", "--format", "{{.State.Pid}}",
                           name], capture_output=True, text=True, check=True)
    (server,) = processes.children_of(int(proc.stdout))
    return server


def test_a_fork_sweep_runs_in_one_container_as_cell_mode_does(runtime,
                                                              tmp_path):
    done = {}
    for isolation in ("fork", "cell"):
        ran = subprocess.run(bench_argv(runtime, tmp_path / isolation,
                                        isolation), cwd=ROOT, env=cli_env(),
                             capture_output=True, text=True, timeout=900)
        assert ran.returncode == 0, ran.stdout + ran.stderr
        done[isolation] = (tmp_path / isolation / "latest").resolve()
    run_dir = done["fork"]
    cells = [forked(run_dir, n) for n in NETWORKS]
    assert [c[:3] for c in cells] == [("ok", "fork", 1), ("ok", "fork", 2),
                                      ("ok", "fork", 3)]
    assert len({c[3] for c in cells}) == 1                  # one server
    assert len({c[4] for c in cells} | {cells[0][3]}) == 4  # own children
    assert store.read_run(run_dir)["isolation"] == "fork"
    for network in NETWORKS:
        fork, cell = result(run_dir, network), result(done["cell"], network)
        assert store.validation_errors(fork) == []
        assert fork["environment"]["container"]["runtime"] == runtime
        # the same cell, model, losses and environment: only times differ
        assert untimed(fork) == untimed(cell)
    assert not containers(runtime, run_dir)


def sweep_at_fcn_r(runtime, out, timeout_s):
    """(the sweep, its run folder) once fcn-r, the key's second cell, is
    timing in a child of the server that forked lstm32's."""
    return three_cells_at_fcn_r(
        bench_argv(runtime, out, timeout_s=timeout_s, endless=True), out)


# Charliecloud makes no PID namespace: its child is signalled and its end
# told as natively (tests/runs/test_fork_faults.py); the container engines'
# own paths (a signal through exec, a host pid found) are checked in each.
ENGINES = pytest.mark.parametrize("runtime", ["docker", "podman"],
                                  indirect=True)


@ENGINES
def test_a_child_killed_mid_cell_is_that_cell_alone_and_resume_measures_it(
        runtime, tmp_path):
    # 25 s: ample to kill fcn-r's child once it times; the resumed fcn-r
    # ends by it, its child stopped through the engine
    out = tmp_path / "runs"
    proc, run_dir = sweep_at_fcn_r(runtime, out, timeout_s=25)
    server = server_here(runtime, run_dir)
    (child,) = processes.children_of(server)
    os.kill(child, signal.SIGKILL)
    _out, err = proc.communicate(timeout=600)
    assert "Traceback" not in err, err
    assert statuses(run_dir) == {job_id("lstm32"): "ok",
                                 job_id("fcn-r"): "error",
                                 job_id("lstm64"): "ok"}, err
    killed = result(run_dir, "fcn-r")
    assert killed["error"]["type"] == "Killed"
    message = killed["error"]["message"]
    assert "killed by SIGKILL from outside" in message, message
    # told by the child's death, not by its container's state (it ran on)
    assert "container exited" not in message, message
    # the server went on: lstm64 is its third child
    assert forked(run_dir, "lstm64")[2:4] == (3, forked(run_dir,
                                                         "lstm32")[3])
    kept = {n: result(run_dir, n) for n in ("lstm32", "lstm64")}

    again = subprocess.run(bench_argv(runtime, out, timeout_s=25,
                                      endless=True) + ["--resume"],
                           cwd=ROOT, env=cli_env(), capture_output=True,
                           text=True, timeout=900)
    assert "2 of 3 jobs already done" in again.stdout, \
        again.stdout + again.stderr
    assert {n: result(run_dir, n) for n in ("lstm32", "lstm64")} == kept
    assert statuses(run_dir)[job_id("fcn-r")] == "timeout", again.stderr
    stopped = result(run_dir, "fcn-r")
    # measured again, in a fresh server's first child, which its timeout
    # stopped (SIGTERM: what it timed is kept)
    assert forked(run_dir, "fcn-r")[1:3] == ("fork", 1)
    assert stopped["timing"]["per_iteration_s"]
    assert not containers(runtime, run_dir)


@pytest.mark.parametrize("runtime", ["docker"], indirect=True)
def test_a_timeout_stops_the_child_alone_and_the_server_goes_on(
        runtime, tmp_path):
    # 15 s: fcn-r times before it (a forked child starts in a second)
    run_dir = three_cells_fcn_r_timed_out(
        bench_argv(runtime, tmp_path / "runs", timeout_s=15, endless=True),
        tmp_path / "runs")
    # SIGTERM reached the child, which kept what it timed ...
    assert result(run_dir, "fcn-r")["timing"]["per_iteration_s"]
    # ... and the server forked lstm64 next: it was not stopped
    server = forked(run_dir, "lstm32")[3]
    assert [forked(run_dir, n)[2:4] for n in NETWORKS] == [
        (1, server), (2, server), (3, server)]
    assert not containers(runtime, run_dir)


def test_a_child_out_of_memory_is_oom_alone_and_the_server_goes_on(
        tmp_path):
    """Under docker's --memory (the runtime's option, not a flag: the
    pipeline as `invoke bench` runs it): fcn5's 118M parameters cannot fit
    in 400 MB, so the kernel kills the child that builds them, never the
    server (MXNet imported, a fraction of that); the cell is `oom` from
    the kernel log's victim, the child's pid on this host, and the next
    cell is the same server's next child."""
    docker_image()
    jobs = [dockercells.make_job(dockercells.make_cell(
        FRAMEWORK, network, batch, iterations=2))._replace(isolation="fork")
        for network, batch in (("fcn5", 64), ("fcn-r", 16))]
    with pytest.MonkeyPatch.context() as patch:
        for name, value in cli_env().items():
            patch.setenv(name, value)
        rt = docker_runtime.Runtime(memory="400m", name_prefix=PREFIX)
        run_dir, entries, results = dockercells.run_pipeline(rt, jobs,
                                                             tmp_path)
    hog, small = (results[job.id] for job in jobs)
    assert hog["status"] == "oom", hog["error"]
    assert "its victim, as the kernel log says, was the cell's forked " \
        "child" in hog["error"]["message"], hog["error"]["message"]
    assert small["status"] == "ok", small["error"]
    assert small["isolation"]["position"] == 2
    assert not containers("docker", run_dir)


@ENGINES
def test_ctrl_c_stops_the_container_and_leaves_none(runtime, tmp_path):
    proc, run_dir = sweep_at_fcn_r(runtime, tmp_path / "runs", timeout_s=900)
    os.killpg(proc.pid, signal.SIGINT)  # what Ctrl-C sends
    _out, err = proc.communicate(timeout=180)
    assert proc.returncode == 130, err
    assert "kept 1 finished job(s)" in err and "Traceback" not in err
    stopped = result(run_dir, "fcn-r")
    assert stopped["error"]["type"] == "Terminated"
    assert forked(run_dir, "fcn-r")[1:3] == ("fork", 2)
    assert not containers(runtime, run_dir)
