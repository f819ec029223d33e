"""What the tests of --isolation group share (test_groups, test_groups_oom,
test_groups_repeat, test_groups_default): a three-cell sweep of the
scripted harness (tests/fake_harness.py behind tests/bin/scripted-python)
and its results read back by network; jobs for the pure functions."""
import json
import os
from pathlib import Path

from dlrepro.run import store
from dlrepro.run.job import Job, Placement
from paths import SCRIPTED

BENCH = ["bench", "--framework", "pytorch", "--runtime", "native",
         "--python", SCRIPTED, "--iterations", "20", "--warmup", "1",
         "--threads", "1", "--network", "fcn5", "--network", "fcn8",
         "--network", "fcn-r"]
GROUP = BENCH + ["--isolation", "group"]
NETWORKS = ("fcn5", "fcn8", "fcn-r")


def result(run_dir, network):
    return json.loads((Path(run_dir) / f"pytorch-cpu-{network}-cpu-b16-t1"
                       f".json").read_text())


def placed(run_dir, network):
    """(status, position in its worker's group, worker pid) of a cell."""
    found = result(run_dir, network)
    isolation = found.get("isolation") or {}
    return (found["status"], isolation.get("position"),
            isolation.get("worker_pid"))


def statuses(run_dir):
    return {next(n for n in NETWORKS if f"-{n}-cpu-" in e["id"]): e["status"]
            for e in store.read_run(run_dir)["jobs"]}


def alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def job(network, process=1, framework="pytorch", seed=0, isolation="group"):
    """A bench job as bench.plan makes it, for the ordering's pure
    functions (dlrepro.run.groups)."""
    cell = {"framework": framework, "profile": "cpu", "network": network,
            "runtime": "native", "device": "cpu", "gpus": 0, "threads": 1,
            "precision": "default", "compile": None,
            "clock_policy": "observe", "seed": seed}
    suffix = f"-p{process}" if process > 1 else ""
    return Job(id=f"{framework}-{network}{suffix}", kind="bench", spec=cell,
               timeout_s=60, placement=Placement(framework, "cpu", "cpu", 1,
                                                 0, "observe"),
               process=process, isolation=isolation)


def worker_pids(run_dir):
    """PIDs of the run's workers (a fork server's children too): a
    worker's command line names no run folder, but its standard error is
    its `<first job id>.worker.log` there."""
    pids = []
    for proc in Path("/proc").iterdir():
        try:
            log = os.readlink(proc / "fd" / "2")
        except OSError:
            continue
        if log.startswith(f"{run_dir}/") and log.endswith(".worker.log"):
            pids.append(int(proc.name))
    return pids
