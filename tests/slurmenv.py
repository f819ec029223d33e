"""What the Slurm test modules share (tests/slurm/test_slurm_results.py,
test_slurm_limits.py, test_engines.py): the test cluster or a skip, the
fake cells' `invoke bench --executor slurm`, and what a run folder and
Slurm say about a network's task. Each test module asks for cluster_for
in an autouse fixture, so that no test runs without a cluster or leaves
its processes and Slurm jobs behind."""
import json
import os
import shutil
import signal
import subprocess
from pathlib import Path

import pytest

import cli
import fake_harness
import needs
import waits
from dlrepro.run import store
from harness.timing import FIRST_TIMED
from cli import invoke  # noqa: F401 (this module's callers')
from paths import SCRIPTED

FAKE = ["bench", "--framework", "pytorch", "--runtime", "native",
        "--python", SCRIPTED, "--warmup", "1", "--threads", "1",
        "--executor", "slurm"]


UP = ("idle", "mixed", "allocated", "completing")
# States a node passes through on its way up (slurmctld restarted, the
# node registering again): waited for, not taken as a cluster without one.
COMING_UP = ("planned", "unknown", "not_responding", "powering_up")


def _node_states():
    proc = subprocess.run(["sinfo", "-h", "-o", "%T"], text=True,
                          capture_output=True, timeout=30)
    return proc, [s.rstrip("*~#!%$@^-").lower() for s in proc.stdout.split()]


def _cluster_or_skip():
    reason = None
    if shutil.which("sinfo") is None:
        reason = "no Slurm client commands (sinfo) on PATH"
    else:
        proc, states = _node_states()
        if proc.returncode == 0 and any(s in COMING_UP for s in states):
            try:
                waits.wait_for(lambda: any(
                    s in UP for s in _node_states()[1]), seconds=120,
                    every=1, what="a Slurm node to come up")
            except AssertionError:
                pass
            proc, states = _node_states()
        if proc.returncode != 0 or not any(s in UP for s in states):
            reason = (f"no Slurm node up (sinfo: "
                      f"{(proc.stderr or proc.stdout).strip() or 'nothing'})")
    if reason is not None:
        needs.missing(reason, ".ci/slurm.sh", "DLREPRO_REQUIRE_SLURM")


def _accounting_or_skip():
    """The test cluster's accounting (slurmdbd: sacct, accounts and QOS
    enforced) and its preempting partition `high`, as .ci/slurm.sh sets
    them up; a cluster without them skips (fails in CI)."""
    config = subprocess.run(["scontrol", "show", "config"], text=True,
                            capture_output=True, timeout=30).stdout
    said = dict(line.split("=", 1) for line in
                (" ".join(l.split()) for l in config.splitlines())
                if " = " in line)
    said = {k.strip(): v.strip() for k, v in said.items()}
    partitions = subprocess.run(["sinfo", "-h", "-o", "%R"], text=True,
                                capture_output=True, timeout=30).stdout
    reason = None
    if said.get("AccountingStorageType") != "accounting_storage/slurmdbd":
        reason = "no Slurm accounting (AccountingStorageType " \
                 f"{said.get('AccountingStorageType')})"
    elif "qos" not in said.get("AccountingStorageEnforce", ""):
        reason = "Slurm does not enforce accounts and QOS"
    elif "high" not in partitions.split():
        reason = "no preempting partition `high`"
    if reason is not None:
        needs.missing(reason, ".ci/slurm.sh", "DLREPRO_REQUIRE_SLURM")


def _queued(under=None):
    """Array job ids in Slurm; with `under`, only those whose batch script
    lies under that folder (a test's own, not another user's)."""
    lines = subprocess.run(["squeue", "-h", "-o", "%F|%o"],
                           capture_output=True, text=True).stdout.split()
    return {line.split("|")[0] for line in lines
            if under is None or line.split("|", 1)[-1].startswith(
                str(under))}


STARTED = []


@pytest.fixture
def slurm_cluster(tmp_path):
    """The one-node cluster or a skip, nothing left behind: a module of
    Slurm tests asks for it with pytestmark (usefixtures)."""
    yield from cluster_for(tmp_path)


def cluster_for(tmp_path):
    """A cluster, and nothing of a test left behind: its submitting
    processes stopped, its Slurm jobs cancelled (a generator for a
    fixture: it yields while the test runs)."""
    _cluster_or_skip()
    yield
    for proc in STARTED:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    STARTED.clear()
    left = _queued(under=tmp_path)
    if left:
        subprocess.run(["scancel"] + sorted(left))


def start(*args, modes=""):
    proc = cli.start(*args, modes=modes)
    STARTED.append(proc)
    return proc


def fake(out, *networks, iterations=3, extra=()):
    return FAKE + ["--out", str(out), "--iterations", str(iterations)] + [
        a for n in networks for a in ("--network", n)] + list(extra)


def latest(out):
    return (Path(out) / "latest").resolve()


def record(out):
    return store.read_run(latest(out))


def result(out, network):
    path = next(p for p in latest(out).glob(f"*-{network}-*.json")
                if p.name.count(".") == 1)
    return json.loads(path.read_text())


def task_of(out, network):
    """The Slurm task id (ARRAY_INDEX) of a network's job, once submitted."""
    if not (latest(out) / "run.json").exists():
        return None
    for entry in record(out)["jobs"]:
        if f"-{network}-" in entry["id"] and entry.get("slurm"):
            return entry["slurm"]["job_id"]
    return None


def task_state(task):
    proc = subprocess.run(["scontrol", "show", "job", "-o", task],
                          capture_output=True, text=True)
    for token in proc.stdout.split():
        if token.startswith("JobState="):
            return token.split("=", 1)[1]
    return None


def slow_steps(out, network):
    """How many steps the task of `network`, in mode slow, has begun."""
    logs = list(latest(out).glob(f"*-{network}-*.log"))
    return sum(log.read_text().count(fake_harness.SLOW_STEP) for log in logs)


def timing(out, network):
    """Whether the task of `network` has finished a timed iteration."""
    return waits.said_first_timed(*latest(out).glob(f"*-{network}-*.log"))


def running(out, network):
    task = task_of(out, network)
    return task if task and task_state(task) == "RUNNING" else None


def comparable(result):
    """What a result says about its cell, without what differs between two
    runs of it (times, the host's process, where it ran)."""
    return {"status": result["status"], "cell": result["cell"],
            "fields": sorted(result),
            "model": {k: v for k, v in result["model"].items()
                      if not k.startswith("achieved")},
            "environment": sorted(result["environment"]),
            "timing": sorted(result["timing"] or {})}


def timed_cells(out):
    """Cells of the run's workers that have finished a timed iteration (a
    worker's log is copied into its job's log only when the cell ends)."""
    return sum(path.read_text(errors="replace").count(FIRST_TIMED)
               for path in latest(out).glob("*.worker.log"))


def finished(out, name):
    """The cell's final result, written by its task, or None."""
    path = next((p for p in latest(out).glob(f"*-{name}-cpu-*.json")
                 if p.name.count(".") == 1), None)
    try:
        found = json.loads(Path(path).read_text()) if path else None
    except ValueError:
        return None
    return found if found and "wall_s" in (found.get("engine") or {}) \
        else None


THREE = ("fcn5", "fcn8", "fcn-r")


def statuses_of(out, networks=THREE):
    """{network: its job's status in run.json}."""
    return {next(n for n in networks if f"-{n}-cpu-" in e["id"]):
            e["status"] for e in record(out)["jobs"]}


def scancel_mid_key(out, extra):
    """fcn5, a slow fcn8 and fcn-r in one task (a group's worker or a fork
    server: `extra` names the mode), scancelled while fcn8 measures: fcn5
    stays ok, fcn8 keeps what it measured and fcn-r is cancelled unbegun,
    both `Cancelled`; then --resume measures the two, and fcn5 not again.
    The cancelled task's id."""
    proc = start(*fake(out, *THREE, iterations=60, extra=extra),
                 modes="fcn8=slow")
    waits.wait_for(lambda: (latest(out) / "run.json").exists() and
                   finished(out, "fcn5") and timed_cells(out) == 2)
    # the watcher ends the finished cell while its task runs on, and
    # counts as running only the cell under way
    waits.wait_for(lambda: list(statuses_of(out).values())[:2] ==
                   ["ok", "running"])
    assert statuses_of(out)["fcn-r"] != "running"
    task = result(out, "fcn5")["engine"]["job_id"]
    subprocess.run(["scancel", task], check=True)
    _out, err = proc.communicate(timeout=180)
    assert proc.returncode == 0, err
    assert statuses_of(out) == {"fcn5": "ok", "fcn8": "error",
                                "fcn-r": "error"}, err
    stopped, unrun = result(out, "fcn8"), result(out, "fcn-r")
    assert stopped["error"]["type"] == unrun["error"]["type"] == "Cancelled"
    assert stopped["timing"]["completed_iterations"] >= 1
    assert task in unrun["error"]["message"]
    kept = result(out, "fcn5")
    again = cli.invoke(*fake(out, *THREE, iterations=60,
                             extra=list(extra) + ["--resume"]))
    assert again.returncode == 0, again.stdout + again.stderr
    assert result(out, "fcn5") == kept              # not measured twice
    assert statuses_of(out) == dict.fromkeys(THREE, "ok")
    return task
