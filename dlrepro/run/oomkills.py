"""Telling the kernel's OOM killer from any other SIGKILL, and this job's
OOM kill from another process's.

A process killed by SIGKILL says nothing about who sent it. The kernel
counts its OOM kills: per memory cgroup (cgroup v2 memory.events, v1
memory.oom_control) and machine-wide (/proc/vmstat). A count that rose
while a job ran says that the OOM killer ran, not whom it killed: another
process in the same cgroup (on v2, or below it), or anywhere on the
machine, may have been its victim.

So the verdict names the victim: the kernel log (/dev/kmsg, read from the
job's start) gives each OOM kill's victim pid, matched against the job's
process. Where it cannot be read (no CAP_SYSLOG with dmesg_restrict set,
a container without /dev/kmsg, another PID namespace), the verdict is
"cannot tell" (None): the job is an error, measured again on resume, never
`oom`.

Not a memory cgroup of the job's own, whose count would name the victim
without the log: on cgroup v1 a kill counts in the victim's cgroup alone,
so a child of ours would hide the job's OOM kills from whoever reads our
cgroup's count (Slurm's task/cgroup ends a task OUT_OF_MEMORY by it); on
v2 a cgroup that holds a process (ours) cannot give its children the
memory controller.
"""
import os
import re
from pathlib import Path

CGROUP_ROOT = Path("/sys/fs/cgroup")
KMSG = "/dev/kmsg"
# /proc/self/ns/pid of the initial PID namespace, the one whose pids the
# kernel log names (PROC_PID_INIT_INO).
INITIAL_PID_NAMESPACE = "pid:[4026531836]"

_OOM_KILL_LINE = re.compile(
    r"oom-kill:.*task_memcg=([^,]*),task=(.*),pid=(\d+),uid=\d+")
_KILLED_LINE = re.compile(r"Killed process (\d+) \((.*?)\)")


def memory_cgroups():
    """(directory, counter file) of this process's memory cgroup, in each
    hierarchy that may hold it (v2, hybrid v2, v1)."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return []
    found = []
    for line in lines:
        _id, controllers, path = line.split(":", 2)
        path = path.lstrip("/")
        if controllers == "":
            found.append((CGROUP_ROOT / path, "memory.events"))
            found.append((CGROUP_ROOT / "unified" / path, "memory.events"))
        elif "memory" in controllers.split(","):
            found.append((CGROUP_ROOT / "memory" / path, "memory.oom_control"))
    return found


def _field(path, name):
    try:
        for line in Path(path).read_text().splitlines():
            key, _, value = line.partition(" ")
            if key == name:
                return int(value)
    except (OSError, ValueError):
        pass
    return None


def count():
    """(OOM kills so far, where that count comes from), or (None, None)
    when this kernel shows none."""
    for directory, counter in memory_cgroups():
        path = directory / counter
        value = _field(path, "oom_kill")
        if value is not None:
            return value, str(path)
    value = _field("/proc/vmstat", "oom_kill")
    if value is not None:
        return value, "/proc/vmstat"
    return None, None


def machine_count():
    """The machine's OOM kills so far (/proc/vmstat), or None: for jobs in
    cgroups this process cannot see (a podman container's)."""
    return _field("/proc/vmstat", "oom_kill")


def verdict(before, after):
    """A runtimes.Death-style (oom, detail) from two count() readings:
    whether the OOM killer ran at all during the job."""
    (first, source), (last, _) = before, after
    if first is None or last is None:
        return None, "the kernel shows no OOM-kill count here"
    if last > first:
        return True, f"the kernel's OOM killer ran during the job " \
                     f"({source}: oom_kill {first} -> {last})"
    return False, f"no OOM kill was recorded during the job ({source})"


# --- the kernel log --------------------------------------------------------


def victims(records):
    """{pid: (command, memory cgroup or None)} of the OOM killer's victims
    named in kernel log records ("pri,seq,usec,flags;message")."""
    found = {}
    for record in records:
        message = record.split(";", 1)[-1].split("\n", 1)[0]
        match = _OOM_KILL_LINE.search(message)
        if match:
            memcg, command, pid = match.groups()
            found[int(pid)] = (command, memcg)
            continue
        match = _KILLED_LINE.search(message)
        if match and int(match.group(1)) not in found:
            found[int(match.group(1))] = (match.group(2), None)
    return found


class KernelLog:
    """The kernel log from the moment this is made on: /dev/kmsg, read
    without blocking. Reading it needs CAP_SYSLOG where dmesg_restrict is
    set; a container seldom has it."""

    def __init__(self, path=KMSG):
        self.path = path
        self.fd, self.why = None, None
        try:
            self.fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
            os.lseek(self.fd, 0, os.SEEK_END)
        except OSError as exc:
            self.close()
            self.why = f"{path} cannot be read ({exc.strerror or exc})"

    def victims(self):
        """victims() since this was made, or None (self.why says why)."""
        if self.fd is None:
            return None
        records = []
        while True:
            try:
                data = os.read(self.fd, 16384)
            except BlockingIOError:
                break
            except BrokenPipeError:
                self.why = f"{self.path}: records were overwritten before " \
                           f"they could be read"
                return None
            except OSError as exc:
                self.why = f"{self.path} cannot be read " \
                           f"({exc.strerror or exc})"
                return None
            if not data:
                break
            records.append(data.decode(errors="replace"))
        return victims(records)

    def close(self):
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


def kernel_pids_are_ours():
    """Whether this process sees the pids the kernel log names."""
    try:
        return os.readlink("/proc/self/ns/pid") == INITIAL_PID_NAMESPACE
    except OSError:
        return False


def _victims(found):
    """'its victim was X' or, when the kernel killed more than one process
    during the job (other work on a shared machine), 'its victims were
    X, Y'."""
    return ("its victims were " if len(found) > 1 else "its victim was ") + \
        _named(found)


def _named(found):
    return ", ".join(f"pid {pid} ({command}"
                     f"{', cgroup ' + memcg if memcg else ''})"
                     for pid, (command, memcg) in sorted(found.items()))


def victim_verdict(found, is_ours, ours, ran, why):
    """(oom, detail) once the OOM killer ran (`ran` says how we know):
    whether the kernel log's victims (`found`, None when unknown: `why`)
    include the job's process (`is_ours(pid, memcg)`, described as
    `ours`)."""
    if not found:
        if found is not None:
            why = "the kernel log names no victim"
        return None, f"{ran}, but whether its victim was {ours} cannot be " \
                     f"told: {why}"
    mine = {pid: v for pid, v in found.items() if is_ours(pid, v[1])}
    if mine:
        return True, f"{ran}; its victim, as the kernel log says, was " \
                     f"{ours}: {_named(mine)}"
    return False, f"{ran}, but {_victims(found)}, not {ours}"


# --- one job ----------------------------------------------------------------


class Watch:
    """Whether the OOM killer killed one job's process: made before the job
    starts, `verdict(pid)` after it died, `close` when the job is over."""

    def __init__(self):
        self.before = count()
        self.log = KernelLog()

    def verdict(self, pid=None):
        """A runtimes.Death-style (oom, detail) for the job's process `pid`
        (the harness, or what execs it), which died."""
        ran, detail = verdict(self.before, count())
        if not ran:
            return ran, detail
        if pid is None:
            found, why = None, "the job's pid is unknown"
        elif not kernel_pids_are_ours():
            found, why = None, "the kernel log's pids are not this " \
                               "process's (another PID namespace)"
        else:
            found, why = self.log.victims(), self.log.why
        return victim_verdict(found, lambda p, _memcg: p == pid,
                              f"the harness (pid {pid})", detail, why)

    def close(self):
        self.log.close()


class Watches:
    """A runtime's Watch per job in flight, by job id."""

    def __init__(self):
        self.watches = {}

    def start(self, job_id):
        self.end(job_id)
        watch = self.watches[job_id] = Watch()
        return watch

    def end(self, job_id):
        watch = self.watches.pop(job_id, None)
        if watch is not None:
            watch.close()
