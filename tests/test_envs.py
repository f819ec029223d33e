"""dlrepro.images.envs: an environment is made by one command at a time."""
import os
import subprocess
import sys

import processes
import waits
from paths import ROOT

# Holds made_alone(target) and logs "<name> in", then (once `go` exists)
# "<name> out".
HOLDER = """
import sys, time
from pathlib import Path
from dlrepro.images import envs
target, log, name = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3]
with envs.made_alone(target):
    with open(log, "a") as out:
        out.write(name + " in\\n")
    while not (target.parent / "go").exists():
        time.sleep(0.01)
    with open(log, "a") as out:
        out.write(name + " out\\n")
"""


def _start(target, log, name):
    return processes.start([sys.executable, "-c", HOLDER, str(target),
                            str(log), name], cwd=ROOT,
                           env=dict(os.environ, PYTHONPATH=str(ROOT)))


def _blocked_on_a_lock(pid):
    # /proc/locks lists a waiting lock request as "N: -> FLOCK ... PID ...".
    with open("/proc/locks") as locks:
        return any("->" in line and line.split()[5] == str(pid)
                   for line in locks)


def test_a_second_maker_waits_for_the_first(tmp_path):
    target, log = tmp_path / "pytorch-cpu", tmp_path / "log"
    first = _start(target, log, "first")
    waits.wait_for(lambda: log.exists() and "first in" in log.read_text(),
                   60)
    second = _start(target, log, "second")
    waits.wait_for(lambda: _blocked_on_a_lock(second.pid), 60,
                   what="the second maker waiting for the first")
    (tmp_path / "go").touch()
    assert first.wait(60) == 0 and second.wait(60) == 0
    assert log.read_text().split("\n") == [
        "first in", "first out", "second in", "second out", ""]
