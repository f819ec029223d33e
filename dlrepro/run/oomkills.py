"""Telling the kernel's OOM killer from any other SIGKILL.

A process killed by SIGKILL says nothing about who sent it. The kernel
counts its OOM kills: per memory cgroup (cgroup v2 memory.events, v1
memory.oom_control) and machine-wide (/proc/vmstat). A job killed while
that count rose was most likely the OOM killer's; a job killed while it
stood still was killed from outside, and is measured again on resume.
"""
from pathlib import Path

CGROUP_ROOT = Path("/sys/fs/cgroup")


def _memory_cgroup():
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return []
    found = []
    for line in lines:
        _id, controllers, path = line.split(":", 2)
        if controllers == "":
            found.append(CGROUP_ROOT / path.lstrip("/") / "memory.events")
            found.append(CGROUP_ROOT / "unified" / path.lstrip("/")
                         / "memory.events")
        elif "memory" in controllers.split(","):
            found.append(CGROUP_ROOT / "memory" / path.lstrip("/")
                         / "memory.oom_control")
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
    for path in _memory_cgroup():
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
    """A runtimes.Death-style (oom, detail) from two count() readings."""
    (first, source), (last, _) = before, after
    if first is None or last is None:
        return None, "the kernel shows no OOM-kill count here"
    if last > first:
        return True, f"the kernel's OOM killer ran during the job " \
                     f"({source}: oom_kill {first} -> {last})"
    return False, f"no OOM kill was recorded during the job ({source})"
