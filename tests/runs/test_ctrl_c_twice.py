"""Ctrl-C twice while a cell's process does not end at SIGTERM (here it is
stopped, SIGSTOP; on a GPU it may sit in a long kernel): the second Ctrl-C
cuts the stop's grace short and kills it, so no process of the sweep
outlives `invoke bench`, its last line says the job was killed, and no
process of that session writes over the result of a later --resume
(issue 42, item 1). Every isolation mode, natively with the scripted
harness (tests/fake_harness.py); the docker runtime's in
test_ctrl_c_twice_containers.py."""
import os
import signal

import pytest

from groupcells import BENCH, result
from fake_harness import SLOW_STEP
from processes import pending, signal_each, stop_each, wait_gone
from scripted import invoke, one_line_error, start, sweep_pids
from interrupts import KILLED, ctrl_c
from waits import text_of, wait_for

def stopped_mid_cell(argv, tmp_path):
    """`invoke ARGV` started with fcn5 slow, and once fcn5 is timing (its
    slow steps have begun) every process of the sweep stopped (SIGSTOP):
    (the sweep, its run folder, the stopped pids)."""
    proc = start(*argv, modes="fcn5=slow")
    wait_for(lambda: (tmp_path / "latest").exists() or
             proc.poll() is not None, what="the run folder")
    run_dir = (tmp_path / "latest").resolve()
    wait_for(lambda: proc.poll() is not None or any(
        SLOW_STEP in text_of(log) for log in run_dir.glob("*.log")),
        what="the slow cell's first step")
    assert proc.poll() is None, proc.communicate()
    stopped = sweep_pids(run_dir)
    stop_each(stopped)
    return proc, run_dir, stopped


@pytest.mark.parametrize("isolation", ["cell", "group", "fork"])
def test_a_second_ctrl_c_kills_a_stopped_cell_and_nothing_outlives_it(
        isolation, tmp_path):
    argv = [*BENCH, "--isolation", isolation, "--out", str(tmp_path)]
    proc, run_dir, stopped = stopped_mid_cell(argv, tmp_path)
    ctrl_c(proc)
    # the stop's SIGTERM, held by the stopped process: the sweep is in
    # the stop's grace
    wait_for(lambda: any(pending(pid, signal.SIGTERM) for pid in stopped),
             what="the stop's SIGTERM")
    ctrl_c(proc)
    ctrl_c(proc)  # and a third, at once: it must not cut the kill short
    _out, err = proc.communicate(timeout=120)
    survivors = sweep_pids(run_dir)

    again = invoke(*argv, "--resume")
    assert again.returncode == 0, again.stdout + again.stderr
    finished = result(run_dir, "fcn5")
    # what an earlier session's process left running does when it goes on
    signal_each(survivors, signal.SIGCONT)
    wait_gone(survivors)
    assert result(run_dir, "fcn5") == finished
    assert finished["status"] == "ok"
    assert not survivors, f"outlived the sweep: {survivors}"
    assert proc.returncode == 130, err
    assert KILLED in err and "Traceback" not in err, err


def test_a_stopped_cell_of_a_killed_sweep_keeps_its_folder_from_a_resume(
        tmp_path):
    """kill -9 of the sweep while its cell is stopped: the cell lives on
    (told SIGTERM, which it takes when it goes on) and the run folder stays
    locked until it has ended, so a --resume is refused (one line) instead
    of having its result overwritten; once the cell has ended, the resume
    runs it again."""
    argv = [*BENCH, "--out", str(tmp_path)]
    proc, run_dir, stopped = stopped_mid_cell(argv, tmp_path)
    os.kill(proc.pid, signal.SIGKILL)
    proc.communicate(timeout=60)

    refused = invoke(*argv, "--resume")
    signal_each(stopped, signal.SIGCONT)
    wait_gone(stopped)
    one_line_error(refused)
    assert "is being run by" in refused.stderr
    assert result(run_dir, "fcn5")["error"]["type"] == "Terminated"
    again = invoke(*argv, "--resume")
    assert again.returncode == 0, again.stdout + again.stderr
    assert result(run_dir, "fcn5")["status"] == "ok"
