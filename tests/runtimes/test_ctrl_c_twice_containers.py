"""Ctrl-C twice in a docker sweep while the cell's harness does not end at
SIGTERM (stopped, SIGSTOP): the second Ctrl-C cuts `docker stop`'s grace
short and kills the container, so neither a container nor a process of the
sweep outlives `invoke bench`, and its last line says the job was killed
(issue 42, item 1; natively: test_ctrl_c_twice.py). The real harness in
the Docker tests' MXNet CPU image, with test_groups_containers' suite,
whose fcn-r runs until it is stopped."""
import os
import signal
import subprocess
from pathlib import Path

import pytest

import processes
import waits
from harness.timing import FIRST_TIMED
from paths import ROOT
from interrupts import KILLED, ctrl_c
from runtimeenv import (cli_env, docker_image, left_behind, run_folder_of,
                        three_cells_argv, three_cells_job_id)


def harness_in_container(run_dir):
    """The host pids of the harness in the run's running container (the
    children of its init, docker's --init)."""
    names = subprocess.run(
        ["docker", "ps", "--filter", f"name={run_dir.name}", "--filter",
         "status=running", "--format", "{{.Names}}"], capture_output=True,
        text=True, check=True).stdout.split()
    assert len(names) == 1, names
    init = subprocess.run(["docker", "inspect", "--format",
                           "{{.State.Pid}}", names[0]], capture_output=True,
                          text=True, check=True).stdout.strip()
    return processes.children_of(int(init))


def naming(run_dir):
    """Host processes whose command line names the run folder (the docker
    client mounts it)."""
    pids = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            if str(run_dir).encode() in cmdline.read_bytes():
                pids.append(int(cmdline.parent.name))
        except OSError:
            continue
    return pids


@pytest.mark.parametrize("isolation", ["cell", "group"])
def test_a_second_ctrl_c_kills_a_stopped_container_and_leaves_nothing(
        isolation, tmp_path):
    docker_image()
    argv = three_cells_argv("docker", tmp_path / "suite.toml",
                            tmp_path / "runs", isolation, 900, endless=True)
    proc = processes.start(argv, cwd=ROOT, env=cli_env(),
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           text=True, start_new_session=True)
    run_dir = run_folder_of(proc, tmp_path / "runs")
    # fcn-r timing: its own log, or its worker's second timed cell
    job_id = three_cells_job_id
    logs, count = ((run_dir / f"{job_id('fcn-r')}.log", 1)
                   if isolation == "cell" else
                   (run_dir / f"{job_id('lstm32')}.worker.log", 2))
    waits.wait_for(lambda: proc.poll() is not None or
                   waits.text_of(logs).count(FIRST_TIMED) >= count,
                   seconds=600, what="fcn-r's first timed iteration")
    assert proc.poll() is None, proc.communicate()
    stopped = harness_in_container(run_dir)
    processes.stop_each(stopped)
    ctrl_c(proc)
    # docker stop's SIGTERM, passed on by the container's init and held
    # by the stopped harness: the sweep is in the stop's grace
    waits.wait_for(lambda: any(processes.pending(pid, signal.SIGTERM)
                               for pid in stopped),
                   what="docker stop's SIGTERM")
    ctrl_c(proc)
    ctrl_c(proc)  # and a third, at once
    _out, err = proc.communicate(timeout=180)
    left = naming(run_dir) + [pid for pid in stopped
                              if os.path.exists(f"/proc/{pid}")]
    processes.signal_each(left, signal.SIGKILL)
    assert not left_behind("docker", run_dir)
    assert not left, f"outlived the sweep: {left}"
    assert proc.returncode == 130, err
    assert KILLED in err and "Traceback" not in err, err
