"""--isolation group on the real command line: `invoke bench` with the
native runtime and tests/bin/scripted-python, whose `-m harness worker` is
the real harness worker running scripted cells (tests/fake_harness.py
worker, modes per network through DLREPRO_FAKE_MODES), so that the worker
process, its protocol, signals and the run folder are all real."""
import os
import signal
from pathlib import Path

import fake_harness
from dlrepro.run import store
from groupcells import (BENCH, GROUP, NETWORKS, alive,
                        compare_names_the_isolation_modes, ctrl_c_keeps_fcn5,
                        placed, result, statuses, three_cells_in_one_worker)
from scripted import invoke, start
from waits import wait_for


def slow_steps(run_dir):
    """Steps begun by a slow cell in any worker of the run (a worker's
    log is copied into its job's log only when the cell ends)."""
    return sum(path.read_text(errors="replace").count(fake_harness.SLOW_STEP)
               for path in Path(run_dir).glob("*.worker.log"))


def start_until_fcn8_is_under_way(tmp_path):
    """A grouped sweep started, once fcn5 is done and the slow fcn8 has
    begun its steps: (its process, its run folder)."""
    proc = start(*GROUP, "--out", str(tmp_path), modes="fcn8=slow")
    run_dir = wait_for(lambda: (tmp_path / "latest").exists() and
                       (tmp_path / "latest").resolve())
    wait_for(lambda: slow_steps(run_dir) and
             statuses(run_dir)["fcn5"] == "ok")
    return proc, run_dir


def test_a_group_runs_its_cells_one_after_another_in_one_worker(tmp_path):
    _done, run_dir, _cells = three_cells_in_one_worker(tmp_path, GROUP)
    assert store.read_run(run_dir)["isolation"] == "group"
    # each job keeps its own log, with what its cell printed
    assert all((run_dir / f"pytorch-cpu-{n}-cpu-b16-t1.log").exists()
               for n in NETWORKS)


def test_isolation_cell_runs_one_process_per_cell(tmp_path):
    done = invoke(*BENCH, "--isolation", "cell", "--out", str(tmp_path))
    assert done.returncode == 0, done.stderr
    run_dir = (tmp_path / "latest").resolve()
    assert store.read_run(run_dir)["isolation"] == "cell"
    assert all(result(run_dir, n).get("isolation") is None for n in NETWORKS)
    assert not list(run_dir.glob("*.worker.log"))


def test_a_cell_past_its_timeout_ends_timeout_and_the_group_goes_on(
        tmp_path):
    # 15 s: ample for a worker to start on a loaded machine, well short of
    # the slow cell's 21 one-second steps
    done = invoke(*GROUP, "--out", str(tmp_path), "--timeout", "15",
                  modes="fcn8=slow")
    run_dir = (tmp_path / "latest").resolve()
    first, slow, last = (placed(run_dir, n) for n in NETWORKS)
    assert statuses(run_dir) == {"fcn5": "ok", "fcn8": "timeout",
                                 "fcn-r": "ok"}, done.stderr
    assert "timeout" in result(run_dir, "fcn8")["error"]["message"]
    assert first[:2] == ("ok", 1) and slow[1:] == (2, first[2])
    # what the stopped cell measured stays in its result
    assert result(run_dir, "fcn8")["timing"]["per_iteration_s"]
    assert last[:2] == ("ok", 1) and last[2] != first[2]


def test_a_worker_killed_mid_cell_ends_that_cell_and_the_group_goes_on(
        tmp_path):
    proc, run_dir = start_until_fcn8_is_under_way(tmp_path)
    worker = placed(run_dir, "fcn5")[2]
    os.kill(worker, signal.SIGKILL)
    _out, err = proc.communicate(timeout=120)
    assert statuses(run_dir) == {"fcn5": "ok", "fcn8": "error",
                                 "fcn-r": "ok"}, err
    assert "SIGKILL" in result(run_dir, "fcn8")["error"]["message"]
    assert placed(run_dir, "fcn-r")[1] == 1
    assert placed(run_dir, "fcn-r")[2] != worker


def test_ctrl_c_stops_the_worker_and_resume_runs_the_rest_grouped(
        tmp_path):
    proc, run_dir = start_until_fcn8_is_under_way(tmp_path)
    stopped = ctrl_c_keeps_fcn5(proc, run_dir)
    assert not alive(stopped["isolation"]["worker_pid"])
    kept = result(run_dir, "fcn5")

    again = invoke(*GROUP, "--out", str(tmp_path), "--resume")
    assert again.returncode == 0, again.stderr
    assert result(run_dir, "fcn5") == kept       # not measured twice
    rest = [placed(run_dir, n) for n in ("fcn8", "fcn-r")]
    assert [c[:2] for c in rest] == [("ok", 1), ("ok", 2)]
    assert rest[0][2] == rest[1][2]


def test_an_unknown_isolation_is_one_line_and_no_run(tmp_path):
    done = invoke(*BENCH, "--isolation", "process", "--out", str(tmp_path))
    assert done.returncode == 2
    assert done.stderr.strip().count("\n") == 0
    assert "unknown isolation 'process'" in done.stderr
    assert not list(tmp_path.iterdir())


def test_compare_says_when_the_runs_were_measured_under_different_modes(
        tmp_path):
    compare_names_the_isolation_modes(tmp_path, "group")


def test_a_kill_of_the_sweep_stops_its_worker_and_resume_loses_nothing(
        tmp_path):
    proc, run_dir = start_until_fcn8_is_under_way(tmp_path)
    worker = placed(run_dir, "fcn5")[2]
    os.kill(proc.pid, signal.SIGKILL)
    proc.communicate(timeout=60)
    # the worker hears of its parent's death and ends the cell it ran
    wait_for(lambda: not alive(worker), what="the orphaned worker's end")
    kept = result(run_dir, "fcn5")

    again = invoke(*GROUP, "--out", str(tmp_path), "--resume")
    assert again.returncode == 0, again.stderr
    assert result(run_dir, "fcn5") == kept
    rest = [placed(run_dir, n) for n in ("fcn8", "fcn-r")]
    assert [c[:2] for c in rest] == [("ok", 1), ("ok", 2)]
    assert rest[0][2] == rest[1][2] != worker
