"""--isolation fork through the Slurm engine, against the test cluster
(.ci/slurm.sh): a process key is one array task, whose node entry runs
the fork server (tests/bin/scripted-python's real harness/forkserver.py
with scripted cells) as the local engine does; each cell is a child of
it, and a cell's timeout stops that child alone. Shared helpers:
tests/slurmenv.py; the group counterpart: tests/slurm/test_slurm_groups.py."""
import pytest

from slurmenv import (fake, invoke, record, result, scancel_mid_key,
                      statuses_of)

pytestmark = pytest.mark.usefixtures("slurm_cluster")

NETWORKS = ("fcn5", "fcn8", "fcn-r")
FORK = ["--isolation", "fork"]


def forked(out, network):
    """(status, position among its server's children, server pid, child
    pid, Slurm task) of a cell."""
    found = result(out, network)
    isolation = found.get("isolation") or {}
    return (found["status"], isolation.get("mode"), isolation.get(
        "position"), isolation.get("worker_pid"), isolation.get("pid"),
        (found.get("slurm") or {}).get("job_id"))


def test_a_key_is_one_task_one_server_and_a_timeout_stops_the_child(
        tmp_path):
    out = tmp_path / "r"
    done = invoke(*fake(out, *NETWORKS, iterations=20,
                        extra=FORK + ["--timeout", "15"]),
                  modes="fcn8=slow")
    assert " in 1 task(s), one per group" in done.stdout, \
        done.stdout + done.stderr
    assert statuses_of(out) == {"fcn5": "ok", "fcn8": "timeout",
                             "fcn-r": "ok"}, done.stdout + done.stderr
    assert record(out)["isolation"] == "fork"
    cells = [forked(out, n) for n in NETWORKS]
    assert [c[1:3] for c in cells] == [("fork", 1), ("fork", 2),
                                       ("fork", 3)]
    assert len({c[3] for c in cells}) == 1      # one server ...
    assert len({c[4] for c in cells}) == 3      # ... forking each cell
    assert len({c[5] for c in cells}) == 1      # in one array task
    assert result(out, "fcn8")["timing"]["per_iteration_s"]


def test_scancel_mid_key_keeps_finished_cells_and_resume_runs_the_rest(
        tmp_path):
    """scancel of a key's task while its second child measures: the first
    cell's result stays, the child under way keeps what it measured and the
    cell not begun is cancelled; --resume forks the two again, from one
    new task, and measures nothing twice."""
    out = tmp_path / "r"
    task = scancel_mid_key(out, FORK)
    rest = [forked(out, n) for n in ("fcn8", "fcn-r")]
    assert [c[:3] for c in rest] == [("ok", "fork", 1), ("ok", "fork", 2)]
    assert rest[0][3] == rest[1][3]                 # one new server ...
    assert rest[0][5] == rest[1][5] != task         # ... in one new task
