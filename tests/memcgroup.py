"""A memory cgroup of a test's own, with a limit, and a memory hog for it:
real OOM kills by the kernel, beside a cell or inside it (tests of whose
OOM kill a cell's is: test_faults, test_podman_runtime). Needs root and a
memory controller a child cgroup may have (cgroup v1, or v2 with memory
delegated); skips otherwise, and fails in CI."""
import os
import re
import signal
import subprocess
import sys
import time

import pytest

from dlrepro.run import oomkills

LIMIT_BYTES = 400 << 20

# A process that the OOM killer picks first (oom_score_adj 1000) and that
# allocates until it is killed; 2 GiB at most, should no limit hold it.
HOG = ("import time\n"
       "open('/proc/self/oom_score_adj', 'w').write('1000')\n"
       "held = []\n"
       "for _ in range(128):\n"
       "    held.append(b'x' * (16 << 20))\n"
       "    time.sleep(0.01)\n")


def names_victim(detail, pid):
    """Whether an OOM verdict's detail names the hog `pid` among the kernel's
    victims. Other tests on a shared machine may have their own hogs killed
    during the same job, and then the detail names all of them."""
    return re.search(rf"its victims? (?:was|were) (?:pid [^;]*?, )?"
                     rf"pid {pid} \(python", detail) is not None


class MemoryCgroup:
    """Processes join it before they exec (`enter` as a preexec_fn)."""

    def __init__(self, directory, counter):
        self.directory, self.counter = directory, counter

    def enter(self):
        (self.directory / "cgroup.procs").write_text(str(os.getpid()))

    def oom_kills(self):
        for line in (self.directory / self.counter).read_text().splitlines():
            if line.startswith("oom_kill "):
                return int(line.split()[1])

    def processes(self):
        return (self.directory / "cgroup.procs").read_text().split()

    def hog_killed_then_kill(self, pid):
        """A hog in this cgroup is the kernel's OOM victim, then `pid` is
        SIGKILLed from outside: whose kill was whose must be told apart.
        The hog's pid."""
        hog = subprocess.Popen([sys.executable, "-c", HOG],
                               preexec_fn=self.enter)
        assert hog.wait(120) == -signal.SIGKILL
        assert self.oom_kills() == 1  # the kernel's doing, not ours
        os.kill(pid, signal.SIGKILL)
        return hog.pid


def _cannot(reason):
    if os.environ.get("CI"):
        pytest.fail(f"in CI: {reason}")
    pytest.skip(reason)


def _made_under(parent, counter):
    directory = parent / f"dlrepro-test-{os.getpid()}"
    try:
        directory.mkdir()
    except OSError as exc:
        _cannot(f"cannot make a memory cgroup under {parent}: {exc}")
    if not (directory / counter).exists():
        directory.rmdir()
        _cannot(f"{parent} gives its child cgroups no memory controller")
    limit = "memory.limit_in_bytes" if counter == "memory.oom_control" \
        else "memory.max"
    (directory / limit).write_text(str(LIMIT_BYTES))
    return MemoryCgroup(directory, counter)


def _emptied(cgroup, seconds=60):
    for pid in cgroup.processes():
        os.kill(int(pid), signal.SIGKILL)
    deadline = time.monotonic() + seconds
    while cgroup.processes() and time.monotonic() < deadline:
        time.sleep(0.1)
    cgroup.directory.rmdir()


@pytest.fixture
def memory_cgroup():
    """A memory cgroup of LIMIT_BYTES, a child of this process's own."""
    if os.geteuid() != 0:
        _cannot("making memory cgroups needs root")
    found = [(d, c) for d, c in oomkills.memory_cgroups()
             if (d / c).exists()]
    if not found:
        _cannot("this process is in no memory cgroup with an OOM-kill count")
    cgroup = _made_under(*found[0])
    yield cgroup
    _emptied(cgroup)
