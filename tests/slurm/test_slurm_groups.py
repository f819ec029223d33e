"""--isolation group through the Slurm engine, against the test cluster
(.ci/slurm.sh): `invoke bench --executor slurm --isolation group` on the
real command line with tests/bin/scripted-python, whose `-m harness
worker` is the real harness worker running scripted cells
(tests/fake_harness.py), in array tasks slurmd really runs. A group is
one array task, its time limit the sum of its cells' limits; each cell
keeps its own result, entry, timeout and log. Shared helpers:
tests/slurmenv.py."""
import json
import os
import math
import subprocess

import pytest

from dlrepro.bench import phases
from dlrepro.run import store
from dlrepro.run import process
from harness.blocks import utc_stamp
from slurmenv import (fake, invoke, latest, record, result,
                      scancel_mid_key, statuses_of)

pytestmark = pytest.mark.usefixtures("slurm_cluster")

NETWORKS = ("fcn5", "fcn8", "fcn-r")
GROUP = ["--isolation", "group"]


def grouped(out, iterations=3, extra=(), modes=""):
    return invoke(*fake(out, *NETWORKS, iterations=iterations,
                        extra=GROUP + list(extra)), modes=modes)


def placed(out, network):
    """(status, position in its worker's group, worker pid, Slurm task)
    of a cell."""
    found = result(out, network)
    isolation = found.get("isolation") or {}
    return (found["status"], isolation.get("position"),
            isolation.get("worker_pid"), (found.get("engine") or {}).get(
                "job_id"))


def network(job_id):
    return next(n for n in NETWORKS if f"-{n}-cpu-" in job_id)


def time_limit(task):
    """The TimeLimit Slurm holds for a task, in minutes."""
    said = subprocess.run(["scontrol", "show", "job", "-o", task],
                          capture_output=True, text=True).stdout
    value = next(t.split("=", 1)[1] for t in said.split()
                 if t.startswith("TimeLimit="))
    hours, minutes, seconds = (int(p) for p in value.split("-")[-1]
                               .split(":"))
    return hours * 60 + minutes + seconds / 60


def test_a_group_is_one_array_task_in_one_worker_its_limit_the_sum(
        tmp_path):
    out = tmp_path / "r"
    done = grouped(out, extra=["--timeout", "60"])
    assert done.returncode == 0, done.stdout + done.stderr
    assert "submitted 3 job(s) to Slurm as array job(s) " in done.stdout
    assert " in 1 task(s), one per group" in done.stdout
    [array] = record(out)["slurm"]["arrays"]
    assert "--array=0-0" in array["sbatch"]
    assert array["tasks"] == [array["jobs"]] and len(array["jobs"]) == 3
    submission = json.loads((latest(out) / "slurm" / "submit-0.json")
                            .read_text())
    assert submission["tasks"] == [array["jobs"]]
    cells = [placed(out, n) for n in NETWORKS]
    assert [c[:2] for c in cells] == [("ok", 1), ("ok", 2), ("ok", 3)]
    assert len({c[2] for c in cells}) == 1          # one worker
    task = cells[0][3]
    assert {c[3] for c in cells} == {task}          # one array task
    # each cell: 60 s + the grace after SIGTERM + 10 minutes to prepare
    cell = 60 + process.GRACE_S + 600
    assert f"--time={math.ceil(3 * cell / 60)}" in array["sbatch"]
    assert time_limit(task) == math.ceil(3 * cell / 60)
    assert statuses_of(out) == dict.fromkeys(NETWORKS, "ok")
    for entry in record(out)["jobs"]:
        assert entry["slurm"]["job_id"] == task
        assert (latest(out) / entry["log"]).exists()


def test_a_cell_past_its_timeout_ends_timeout_and_the_group_goes_on(
        tmp_path):
    out = tmp_path / "r"
    # 15 s: ample for a worker to start on a loaded machine, well short of
    # the slow cell's 21 one-second steps
    done = grouped(out, iterations=20, extra=["--timeout", "15"],
                   modes="fcn8=slow")
    assert statuses_of(out) == {"fcn5": "ok", "fcn8": "timeout",
                             "fcn-r": "ok"}, done.stdout + done.stderr
    first, slow, last = (placed(out, n) for n in NETWORKS)
    assert slow[1:3] == (2, first[2])
    assert result(out, "fcn8")["timing"]["per_iteration_s"]
    # the rest of the group, in a fresh worker of the same task
    assert last[:2] == ("ok", 1) and last[2] != first[2]
    assert first[3] == slow[3] == last[3]


def test_a_cell_out_of_memory_in_its_worker_is_measured_again_alone(
        tmp_path):
    """As locally (tests/runs/test_groups_oom.py): the scripted fcn8 runs out of
    memory only when it is not its worker's first cell, so alone it fits.
    The node entry once had no way to run a job alone (its Context's
    launch was None): the cell raised, and the rest of its group never
    ran."""
    out = tmp_path / "r"
    done = grouped(out, extra=["--timeout", "60"],
                   modes="fcn8=oom-in-group")
    assert done.returncode == 0, done.stdout + done.stderr
    assert statuses_of(out) == dict.fromkeys(NETWORKS, "ok"), \
        done.stdout + done.stderr
    first, alone, last = (placed(out, n) for n in NETWORKS)
    attempt = result(out, "fcn8")["isolation"]["retried_alone_after"]
    assert (attempt["status"], attempt["position"]) == ("oom", 2)
    assert attempt["worker_pid"] == first[2]
    assert result(out, "fcn8")["isolation"]["mode"] == "cell"
    assert len(result(out, "fcn8")["timing"]["per_iteration_s"]) == 3
    # the rest of the group, in a fresh worker of the same task, each
    # result saying where it ran
    assert last[:2] == ("ok", 1) and last[2] != first[2]
    assert first[3] == alone[3] == last[3]


def test_scancel_mid_group_keeps_finished_cells_and_resume_runs_the_rest(
        tmp_path):
    out = tmp_path / "r"
    task = scancel_mid_key(out, GROUP)
    arrays = record(out)["slurm"]["arrays"]
    assert len(arrays) == 2
    assert [[network(j) for j in t] for t in arrays[1]["tasks"]] == \
        [["fcn8", "fcn-r"]]                         # regrouped, one task
    rest = [placed(out, n) for n in ("fcn8", "fcn-r")]
    assert [c[:2] for c in rest] == [("ok", 1), ("ok", 2)]
    assert rest[0][2] == rest[1][2] and rest[0][3] != task
    assert store.read_run(latest(out))["status"] == "complete"


def test_a_groups_limit_sums_each_cells_time_limit_as_given(tmp_path):
    out = tmp_path / "r"
    done = grouped(out, extra=["--time-limit", "1:30"])  # Slurm's M:S
    assert done.returncode == 0, done.stdout + done.stderr
    [array] = record(out)["slurm"]["arrays"]
    assert "--time=5" in array["sbatch"]            # 3 x 90 s, in minutes
    assert time_limit(placed(out, "fcn5")[3]) == 5


def test_a_groups_summed_limit_the_partition_refuses_leaves_no_run(
        tmp_path):
    """A partition whose MaxTime admits each cell's limit but not their
    sum in one task: refused in one line before any run folder exists
    (an sbatch on PATH that refuses --time above 4 minutes, as such a
    partition's would, then runs the real one)."""
    real = subprocess.run(["which", "sbatch"], capture_output=True,
                          text=True).stdout.strip()
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    sbatch = bin_dir / "sbatch"
    sbatch.write_text(
        "#!/bin/sh\n"
        "for a in \"$@\"; do case $a in --time=*)\n"
        "  [ \"${a#--time=}\" -gt 4 ] && {\n"
        "    echo 'sbatch: error: Requested time limit is invalid "
        "(missing or exceeds some limit)' >&2; exit 1; };;\n"
        "esac; done\n"
        f"exec {real} \"$@\"\n")
    sbatch.chmod(0o755)
    out = tmp_path / "r"
    env = dict(os.environ, PATH=f"{bin_dir}:{os.environ['PATH']}")
    done = invoke(*fake(out, *NETWORKS, extra=GROUP + [
        "--time-limit", "1:30"]), env=env)     # 3 x 90 s: 5 minutes
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stderr.count("\n") == 1, done.stderr
    assert "Slurm rejects the job" in done.stderr
    assert not out.exists()


def test_each_frameworks_default_in_one_submission(tmp_path):
    """Without --isolation, Caffe's cells (grouped by default natively,
    where only a --python of its own runs them) share one array task and
    worker, and PyTorch's (forked by default on the CPU)
    one task and fork server, each cell a child of its own; queued by one
    submission."""
    out = tmp_path / "r"
    networks = ("fcn5", "fcn-r")
    args = fake(out, *networks)
    args[args.index("pytorch") + 1:args.index("pytorch") + 1] = [
        "--framework", "caffe"]
    done = invoke(*args)
    assert done.returncode == 0, done.stdout + done.stderr
    run = record(out)
    assert run["isolation"] == {"pytorch": "fork", "caffe": "group"}
    tasks = sorted(t for array in run["slurm"]["arrays"]
                   for t in array["tasks"])
    assert [{j.split("-")[0] for j in t} for t in tasks] == [
        {"caffe"}, {"pytorch"}], tasks
    found = {e["id"]: json.loads((latest(out) / f"{e['id']}.json")
                                 .read_text()) for e in run["jobs"]}
    assert {r["status"] for r in found.values()} == {"ok"}
    caffe = [r for i, r in found.items() if i.startswith("caffe-")]
    torch = [r for i, r in found.items() if i.startswith("pytorch-")]
    for cells, mode in ((caffe, "group"), (torch, "fork")):
        assert [r["isolation"]["mode"] for r in cells] == [mode] * 2
        assert sorted(r["isolation"]["position"] for r in cells) == [1, 2]
        assert len({r["isolation"]["worker_pid"] for r in cells}) == 1
        assert len({r["engine"]["job_id"] for r in cells}) == 1
    # forked: each cell a process of its own
    assert len({r["isolation"]["pid"] for r in torch}) == 2
    # Each job's window is its node side's: it holds the job's phases,
    # and run.json has a start even for a cell that ended between polls.
    # (The process's start is read in the kernel's clock ticks placed by
    # /proc/uptime, both of 10 ms: it may lie up to 20 ms early.)
    for entry in run["jobs"]:
        mine = found[entry["id"]]
        start, end = phases.window_of(entry, mine)
        moments = [at for at in mine["phases"].values() if at is not None]
        assert start <= min(moments) + 0.02, entry["id"]
        assert max(moments) <= end, entry["id"]
        assert entry["started_at"] is not None, entry["id"]
        # Its start and end as the node side saw them, not the watcher's
        # polls.
        node = mine["engine"]
        assert (entry["started_at"], entry["finished_at"]) == (
            utc_stamp(node["started_epoch_s"]),
            utc_stamp(node["started_epoch_s"] + node["wall_s"])), entry["id"]
    assert sorted(s.jobs for s in phases.sweeps(list(zip(
        run["jobs"], (found[e["id"]] for e in run["jobs"]))))) == [2, 2]
