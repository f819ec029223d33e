"""A sweep paused (Ctrl-Z then `fg`, or SIGSTOP and SIGCONT) for longer
than a cell's timeout while its cell goes on and ends: the cell is `ok`
with its whole result, not rewritten as a timeout, whatever the wall clock
says (issue 42, item 2). Only `invoke bench` is paused: its cells run in
sessions of their own, which Ctrl-Z does not stop. Natively with the
scripted harness, in every isolation mode; the docker runtime's in
test_paused_sweep_containers.py."""
import os
import signal
import time

import pytest

import processes
from dlrepro.run import store
from groupcells import BENCH, result, statuses
from scripted import start
from waits import said_first_timed, wait_for

TIMEOUT_S = 15


def specs_done(run_dir):
    """Whether every cell fed so far (its spec file written) has its `ok`
    result on disk."""
    specs = list(run_dir.glob("*.spec.json"))
    return specs and all(
        (store.read_result(run_dir / spec.name.replace(".spec.json",
                                                       ".json"))[0]
         or {}).get("status") == "ok" for spec in specs)


def paused_past_the_timeout(proc, run_dir, timeout_s):
    """Pause the sweep `proc` (its process group, as Ctrl-Z does) once a
    cell is timing, until the cells it fed have ended and `timeout_s` more
    has passed; then go on (SIGCONT)."""
    wait_for(lambda: proc.poll() is not None or
             said_first_timed(*run_dir.glob("*.log")),
             what="a timed iteration")
    assert proc.poll() is None, proc.communicate()
    os.killpg(proc.pid, signal.SIGSTOP)
    paused = time.monotonic()
    wait_for(lambda: processes.is_stopped(proc.pid), what="the pause")
    wait_for(lambda: specs_done(run_dir), seconds=300,
             what="the fed cells' results")
    # the pause itself: longer than the cell's timeout, which it contains
    wait_for(lambda: time.monotonic() - paused > timeout_s + 1,
             seconds=timeout_s + 60, what="the timeout to pass")
    os.killpg(proc.pid, signal.SIGCONT)


@pytest.mark.parametrize("isolation", ["group", "fork", "cell"])
def test_a_cell_that_ended_during_a_pause_is_ok_not_a_timeout(isolation,
                                                              tmp_path):
    proc = start(*BENCH, "--isolation", isolation, "--timeout",
                 str(TIMEOUT_S), "--out", str(tmp_path), modes="fcn5=ok@0.1")
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
