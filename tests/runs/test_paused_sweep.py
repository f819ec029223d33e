"""A sweep paused (Ctrl-Z then `fg`, or SIGSTOP and SIGCONT) for longer
than a cell's timeout while its cell goes on and ends: the cell is `ok`
with its whole result, not rewritten as a timeout, whatever the wall clock
says (issue 42, item 2). Only `invoke bench` is paused: its cells run in
sessions of their own, which Ctrl-Z does not stop. Natively with the
scripted harness, in every isolation mode; the docker runtime's in
test_paused_sweep_containers.py."""

import pytest

from groupcells import BENCH, result, statuses
from interrupts import paused_past_the_timeout
from scripted import start
from waits import wait_for

TIMEOUT_S = 15


@pytest.mark.parametrize("isolation", ["group", "fork", "cell"])
def test_a_cell_that_ended_during_a_pause_is_ok_not_a_timeout(isolation,
                                                              tmp_path):
    proc = start(*BENCH, "--isolation", isolation, "--timeout",
                 str(TIMEOUT_S), "--out", str(tmp_path),
                 # Real seconds: fcn5 (the first cell) still measures when
                 # the pause comes. A scripted clock ended it at once, and
                 # the sweep could end, or stop between a spec and its
                 # process, before the test paused it.
                 modes="fcn5=sleep@0.2")
    wait_for(lambda: (tmp_path / "latest").exists() or
             proc.poll() is not None, what="the run folder")
    run_dir = (tmp_path / "latest").resolve()
    paused_past_the_timeout(proc, run_dir, TIMEOUT_S)
    _out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err
    assert set(statuses(run_dir).values()) == {"ok"}, err
    fcn5 = result(run_dir, "fcn5")
    assert fcn5["error"] is None
    assert len(fcn5["timing"]["per_iteration_s"]) == 20
