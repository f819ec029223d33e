"""A fork server's cells in a container (--isolation fork with docker or
podman): the server is the container's process, each cell a child it
forks, named on its `cell-start` line by its pid in the container's PID
namespace, which this host does not share. So the host

  - signals a child through the engine (`exec` in the container, as the
    container's user: a root container's child is root's), never by that
    pid here, where it names another process or none;
  - finds the child's pid on this host (the kernel log names an OOM kill's
    victim by it) among the container's processes, while the child runs;
  - tells how a child died from the machine's OOM count and the kernel log
    (the container's memory cgroup is not this process's), every victim
    since the server started kept: the container's own word (its State)
    speaks only of its server, and only once the container has ended.

Charliecloud makes no PID namespace: there a child's pid is this host's,
and a fork server's cell is told and signalled as natively."""
import os
import subprocess
from pathlib import Path

from dlrepro.run import oomkills
from dlrepro.run.runtimes import Death
from harness import procstat

EXEC_TIMEOUT_S = 60
# Sends signal argv[2] to pid argv[1], from inside the container: the
# image's Python, present in every image (a `kill` binary may not be).
KILL = "import os, sys; os.kill(int(sys.argv[1]), int(sys.argv[2]))"


def signal_in(engine_bin, name, python):
    """signal(pid, signum): `signum` to the process `pid` of the container
    `name`, as the container sees it; a process already gone is no
    error (its server reaps it and says so)."""
    def send(pid, signum):
        subprocess.run([engine_bin, "exec", name, python, "-c", KILL,
                        str(int(pid)), str(int(signum))],
                       stdin=subprocess.DEVNULL, capture_output=True,
                       timeout=EXEC_TIMEOUT_S, check=False)
    return send


def _parents(proc):
    """{pid: parent pid} of every process this host shows."""
    found = {}
    for entry in os.listdir(proc):
        if not entry.isdigit():
            continue
        try:
            found[int(entry)] = procstat.parent_of(entry, proc)
        except OSError:
            continue  # ended meanwhile
    return found


def _innermost_pid(pid, proc):
    """The pid of this host's process `pid` in its own innermost PID
    namespace (/proc's NSpid, last), or None."""
    try:
        for line in Path(proc, str(pid), "status").read_text().splitlines():
            if line.startswith("NSpid:"):
                return int(line.split()[-1])
    except (OSError, ValueError, IndexError):
        pass
    return None


def host_pid(init_pid, pid, proc="/proc"):
    """The pid on this host of the process the container whose first
    process is `init_pid` (a host pid) names `pid`: among that process's
    descendants here, the one whose innermost pid is `pid`; None once it
    is gone."""
    if init_pid is None or pid is None:
        return None
    parents = _parents(proc)
    inside, grown = {init_pid}, True
    while grown:
        grown = False
        for child, parent in parents.items():
            if parent in inside and child not in inside:
                inside.add(child)
                grown = True
    for candidate in sorted(inside):
        if _innermost_pid(candidate, proc) == int(pid):
            return candidate
    return None


class Children:
    """How a fork server's children died, in the container `name`:
    `container_death` is the container's own post-mortem (its State),
    `state()` the container's State now (None: gone)."""

    def __init__(self, state, container_death):
        self.state = state
        self.container_death = container_death
        self.before = oomkills.machine_count()
        self.log = oomkills.KernelLog()
        self.victims = {}
        self.init_pid = None

    def host_pid(self, pid):
        """The host's pid of the container's process `pid` (a child that
        runs), or None."""
        if self.init_pid is None:
            # Asked of the engine once: the container's first process
            # stays for as long as the container runs.
            self.init_pid = (self.state() or {}).get("Pid") or None
        return host_pid(self.init_pid, pid)

    def post_mortem(self, pid=None):
        """A Death for the child `pid` (this host's pid) that ended without
        a result; the container's own, once it has ended (its server died,
        or was stopped, with the child)."""
        state = self.state()
        if state is None or not state.get("Running"):
            return self.container_death(pid)
        after = oomkills.machine_count()
        if self.before is None or after is None:
            return Death(None, "the kernel shows no OOM-kill count here")
        if after == self.before:
            return Death(False, "no OOM kill was recorded on this machine "
                                "while the cell's fork server ran "
                                "(/proc/vmstat)")
        found = self.log.victims()
        if found is not None:
            self.victims.update(found)
            found = dict(self.victims)
        why = self.log.why
        if pid is None:
            found, why = None, "its pid on this host is unknown (it ended " \
                               "before the host could find it)"
        elif not oomkills.kernel_pids_are_ours():
            found, why = None, "the kernel log's pids are not this " \
                               "process's (another PID namespace)"
        return Death(*oomkills.victim_verdict(
            found, lambda victim, _memcg: victim == pid,
            f"the cell's forked child (pid {pid} here)",
            f"the kernel's OOM killer ran while the cell's fork server ran "
            f"(/proc/vmstat oom_kill {self.before} -> {after})", why))

    def close(self):
        self.log.close()

