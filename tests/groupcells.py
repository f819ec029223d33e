"""What the tests of --isolation group on the real command line share
(test_groups, test_groups_oom): a three-cell sweep of the scripted harness
(tests/fake_harness.py behind tests/bin/scripted-python) and its results
read back by network."""
import json
import os
from pathlib import Path

from dlrepro.run import store
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
