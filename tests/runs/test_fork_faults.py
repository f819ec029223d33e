"""--isolation fork on the real command line with the scripted harness
(tests/fake_harness.py behind tests/bin/scripted-python: the real fork
server, harness/forkserver.py, forking a child per cell that runs it in
the mode DLREPRO_FAKE_MODES gives its network): each cell in a child of
one server per process key, and every promise of a process per cell: a
timeout stops the child and the key goes on, a child or its server or the
sweep killed, Ctrl-C, a child the kernel kills for memory; after each,
--resume loses nothing and measures nothing twice."""
import json
import os
import signal
import subprocess

import fake_harness
import workercells
from dlrepro.run import store
from harness import worker
from groupcells import (BENCH, NETWORKS, alive, child_and_server,
                        compare_names_the_isolation_modes, ctrl_c_keeps_fcn5,
                        result, server_logs, statuses, sweep_in_memory_cgroup,
                        three_cells_in_one_worker)
from paths import ROOT, SCRIPTED
from scripted import invoke, start
from waits import wait_for

FORK = BENCH + ["--isolation", "fork"]


def forked(run_dir, network):
    """(status, position among its server's children, server pid, child
    pid) of a cell."""
    found = result(run_dir, network)
    isolation = found.get("isolation") or {}
    return (found["status"], isolation.get("position"),
            isolation.get("worker_pid"), isolation.get("pid"))


def started_at(run_dir, network):
    return result(run_dir, network)["started_at"]


def fork_checks(run_dir):
    """What the server held before each of its forks (fake_harness.
    fork_checked)."""
    return [json.loads(line[len(fake_harness.FORK_CHECK):])
            for line in server_logs(run_dir).splitlines()
            if line.startswith(fake_harness.FORK_CHECK)]


def start_until_fcn8_is_under_way(tmp_path, *extra):
    proc = start(*FORK, "--out", str(tmp_path), *extra, modes="fcn8=slow")
    run_dir = wait_for(lambda: (tmp_path / "latest").exists() and
                       (tmp_path / "latest").resolve())
    wait_for(lambda: fake_harness.SLOW_STEP in server_logs(run_dir) and
             statuses(run_dir)["fcn5"] == "ok", what="fcn8's first step")
    return proc, run_dir


def resumed(tmp_path, run_dir, done_before):
    """--resume: every cell ends ok, and the cells done before keep their
    results (not measured twice)."""
    kept = {n: result(run_dir, n) for n in done_before}
    again = invoke(*FORK, "--out", str(tmp_path), "--resume")
    assert again.returncode == 0, again.stdout + again.stderr
    assert f"{len(done_before)} of 3 jobs already done" in again.stdout, \
        again.stdout
    assert statuses(run_dir) == {n: "ok" for n in NETWORKS}
    assert {n: result(run_dir, n) for n in done_before} == kept
    return again


def test_each_cell_runs_in_a_child_forked_by_one_server(tmp_path):
    done, run_dir, cells = three_cells_in_one_worker(tmp_path, FORK, forked)
    assert len({c[3] for c in cells} | {cells[0][2]}) == 4  # own children
    assert store.read_run(run_dir)["isolation"] == "fork"
    assert store.read_run(run_dir)["workers"] == [[
        f"pytorch-cpu-{n}-cpu-b16-t1" for n in NETWORKS]]
    for network in NETWORKS:
        found = result(run_dir, network)
        assert store.validation_errors(found) == []
        parent = found["isolation"]["parent"]
        # the child's start is its fork, after the server's import
        assert found["phases"]["process_start"] >= parent["preloaded_at"] \
            >= parent["process_start"]
    # the server never held a thread or NVML across a fork
    assert fork_checks(run_dir) == [
        {"threads": 1, "nvml_sessions": 0, "refusal": None}] * 3
    # where the time went counts the server's start once
    assert "fork server: interpreter and import" in done.stdout


def test_a_gpu_key_never_holds_nvml_across_a_fork(tmp_path, make_cell):
    """GPU cells with the fake NVML, the fork server run as the host runs
    it: each child opens NVML for its cell (inventory, telemetry, clock
    policy); the server never does, so at every fork nothing holds NVML
    open (the fake's own count, which the processes share through its
    state file), and each child restored what its cell changed."""
    import fake_nvml
    state = tmp_path / "nvml.json"
    fake_nvml.configure([fake_nvml.hopper_h200()], path=str(state))
    cell = make_cell(profile="cuda", device="gpu", gpus=1, iterations=3,
                     warmup=1, clock_policy="disable-boost")
    paths = [workercells.write_spec(tmp_path, name, dict(
        cell, network=network), clock_state=name + ".clock-state.json")
        for name, network in zip("abc", NETWORKS)]
    with open(tmp_path / "server.log", "w") as log:
        proc = subprocess.run(
            [SCRIPTED, "-s", "-m", "harness", "worker", "--fork"],
            cwd=ROOT, input="".join(worker.command_line(p) for p in paths),
            stdout=subprocess.PIPE, stderr=log, text=True, timeout=120,
            env=dict(os.environ, FAKE_NVML_STATE=str(state)))
    said = (tmp_path / "server.log").read_text()
    assert proc.returncode == 0, said
    assert proc.stdout.count("cell-done") == 3, proc.stdout + said
    for name in "abc":
        found = json.loads((tmp_path / f"{name}.json").read_text())
        assert found["status"] == "ok", found["error"]
        assert found["isolation"]["mode"] == "fork"
        assert found["environment"]["gpus"], found["environment"]
    checks = [json.loads(line[len(fake_harness.FORK_CHECK):])
              for line in said.splitlines()
              if line.startswith(fake_harness.FORK_CHECK)]
    assert checks == [{"threads": 1, "nvml_sessions": 0, "refusal": None,
                       "fake_nvml_initialised": 0}] * 3, said
    assert json.loads(state.read_text())["initialised"] == 0


def test_a_server_unsafe_to_fork_runs_each_cell_alone_and_says_why(
        tmp_path, monkeypatch):
    monkeypatch.setenv("DLREPRO_FAKE_SERVER_THREAD", "1")
    done = invoke(*FORK, "--out", str(tmp_path))
    assert done.returncode == 0, done.stderr
    run_dir = (tmp_path / "latest").resolve()
    assert statuses(run_dir) == {n: "ok" for n in NETWORKS}
    for network in NETWORKS:
        found = result(run_dir, network)
        assert store.validation_errors(found) == []
        isolation = found["isolation"]
        assert isolation["mode"] == "cell", isolation
        assert isolation["fork_refused"].startswith(
            "the server runs 2 threads"), isolation
    assert [c["refusal"] for c in fork_checks(run_dir)] == []
    assert "not forking: the server runs 2 threads" in server_logs(run_dir)


def test_a_timeout_stops_the_child_and_the_server_goes_on(tmp_path):
    done = invoke(*FORK, "--out", str(tmp_path), "--timeout", "15",
                  modes="fcn8=slow")
    run_dir = (tmp_path / "latest").resolve()
    assert statuses(run_dir) == {"fcn5": "ok", "fcn8": "timeout",
                                 "fcn-r": "ok"}, done.stderr
    first, slow, last = (forked(run_dir, n) for n in NETWORKS)
    # what the stopped child measured stays in its result
    assert result(run_dir, "fcn8")["timing"]["per_iteration_s"]
    # the same server forked the next cell
    assert slow[1:3] == (2, first[2]) and last[1:3] == (3, first[2])


def test_a_child_killed_mid_cell_ends_that_cell_and_resume_runs_it(
        tmp_path):
    proc, run_dir = start_until_fcn8_is_under_way(tmp_path)
    child, server = child_and_server(run_dir)
    assert server == forked(run_dir, "fcn5")[2]
    os.kill(child, signal.SIGKILL)
    out, err = proc.communicate(timeout=120)
    assert statuses(run_dir) == {"fcn5": "ok", "fcn8": "error",
                                 "fcn-r": "ok"}, out + err
    message = result(run_dir, "fcn8")["error"]["message"]
    assert "killed by SIGKILL" in message, message
    # the server lived on and forked the next cell
    assert forked(run_dir, "fcn-r")[1:3] == (3, server)
    kept = {n: result(run_dir, n) for n in ("fcn5", "fcn-r")}
    again = invoke(*FORK, "--out", str(tmp_path), "--resume")
    assert "2 of 3 jobs already done" in again.stdout, again.stdout
    assert statuses(run_dir) == {n: "ok" for n in NETWORKS}
    assert {n: result(run_dir, n) for n in ("fcn5", "fcn-r")} == kept


def test_a_server_killed_after_a_cell_keeps_it_and_a_fresh_one_goes_on(
        tmp_path):
    """fcn5's child SIGKILLs its server just after writing its result:
    the result stands, the next cell is forked by a fresh server."""
    done = invoke(*FORK, "--out", str(tmp_path), modes="fcn5=ok-kill-server")
    run_dir = (tmp_path / "latest").resolve()
    assert statuses(run_dir) == {n: "ok" for n in NETWORKS}, done.stderr
    first, second, third = (forked(run_dir, n) for n in NETWORKS)
    assert second[1] == 1 and second[2] != first[2]
    assert third[1:3] == (2, second[2])
    kept = {n: result(run_dir, n) for n in NETWORKS}
    again = invoke(*FORK, "--out", str(tmp_path), "--resume")
    assert "3 of 3 jobs already done" in again.stdout, again.stdout
    assert {n: result(run_dir, n) for n in NETWORKS} == kept


def test_a_kill_of_the_sweep_ends_server_and_child_and_resume_loses_nothing(
        tmp_path):
    proc, run_dir = start_until_fcn8_is_under_way(tmp_path)
    child, server = child_and_server(run_dir)
    os.kill(proc.pid, signal.SIGKILL)
    proc.communicate(timeout=60)
    # the server hears of its parent's death, passes it on to its child,
    # which ends its cell with what it measured
    wait_for(lambda: not alive(server) and not alive(child),
             what="the orphaned server's and child's end")
    assert result(run_dir, "fcn8")["error"]["type"] == "Terminated"
    resumed(tmp_path, run_dir, ["fcn5"])


def test_ctrl_c_stops_server_and_child_and_resume_runs_the_rest(tmp_path):
    proc, run_dir = start_until_fcn8_is_under_way(tmp_path)
    child, server = child_and_server(run_dir)
    ctrl_c_keeps_fcn5(proc, run_dir)
    assert not alive(server) and not alive(child)
    resumed(tmp_path, run_dir, ["fcn5"])


def test_a_child_the_kernel_kills_for_memory_is_its_own_oom(
        tmp_path, memory_cgroup):
    """The child outgrows the sweep's memory cgroup: the kernel kills the
    child, not its server; the verdict names the child's pid, the cell is
    `oom` (kept by --resume), and the server forks the next cell."""
    _proc, out, err = sweep_in_memory_cgroup(
        [*FORK, "--out", str(tmp_path)], "fcn8=hog", memory_cgroup)
    run_dir = (tmp_path / "latest").resolve()
    assert memory_cgroup.oom_kills() == 1, out + err
    assert statuses(run_dir) == {"fcn5": "ok", "fcn8": "oom",
                                 "fcn-r": "ok"}, out + err
    server = forked(run_dir, "fcn5")[2]
    message = result(run_dir, "fcn8")["error"]["message"]
    assert f"(pid {server})" not in message, message
    assert "its victim, as the kernel log says, was the harness (pid " \
        in message, message
    assert forked(run_dir, "fcn-r")[1:3] == (3, server)
    kept = {n: result(run_dir, n) for n in NETWORKS}
    again = invoke(*FORK, "--out", str(tmp_path), "--resume",
                   modes="fcn8=hog")
    assert "3 of 3 jobs already done" in again.stdout, again.stdout
    assert {n: result(run_dir, n) for n in NETWORKS} == kept


def test_compare_names_runs_measured_under_fork_and_cell(tmp_path):
    compare_names_the_isolation_modes(tmp_path, "fork")
