"""What the rest of the machine did with its CPUs while a cell was timed,
and what the cell's process met there: the host's CPU time from /proc/stat
and the process's page faults and context switches (getrusage), read where
the timing loop reads the process's own CPU time, so that a result says
whether its times include waiting for a CPU that another process (or the
hypervisor) held, or faults that another cell's history would not have
had. Standard library only; None where there is no /proc/stat (not Linux).

/proc/stat is the kernel's, not the container's or the Slurm job's: in
a container or a job step it counts the whole machine, which is what a
neighbour's load is. Its counts are sampled at every clock tick (USER_HZ,
100 a second on Linux), so a figure here is good to about a tick per CPU.
"""
import os
import time
from collections import namedtuple

try:
    import resource
except ImportError:  # not Unix
    resource = None

# seconds since boot, all CPUs together; `at` is time.monotonic(); `own`
# this process's Counts (all its threads) or None.
Snapshot = namedtuple("Snapshot", "at busy_s idle_s steal_s cpus own")
Counts = namedtuple("Counts", "minor_faults major_faults voluntary_switches "
                    "involuntary_switches")

# The warnings judge no shorter window: over one, a tick or two a CPU is
# under 2% of a CPU.
MIN_WINDOW_S = 1.0
# A host with less than this share of its CPUs idle had none to spare, and
# others using at least OTHERS_MIN of a CPU then took time the cell's
# threads wanted.
IDLE_SPARE = 0.05
OTHERS_MIN = 0.1
# Steal above this share of the host's CPU time: the hypervisor ran
# another machine on this one's CPUs often enough to show in a mean.
STEAL_WARNING = 0.02
# How the two warnings begin (`invoke report` puts them first: a busy
# machine explains a high CV or a slow warm-up).
BUSY = "host busy while timed"
STOLEN = "hypervisor steal while timed"


def read(proc="/proc"):
    """The host's CPU time and this process's counts now, or None where
    /proc/stat cannot be read."""
    at = time.monotonic()
    try:
        with open(os.path.join(proc, "stat")) as handle:
            lines = handle.read().splitlines()
        ticks = float(os.sysconf("SC_CLK_TCK"))
        # user nice system idle iowait irq softirq steal [guest guest_nice];
        # guest time is already counted in user and nice.
        fields = [int(v) for v in lines[0].split()[1:9]]
    except (OSError, ValueError, IndexError):
        return None
    cpus = sum(1 for line in lines[1:]
               if line.startswith("cpu") and line[3:4].isdigit())
    if len(fields) < 8 or not lines[0].startswith("cpu ") or not cpus:
        return None
    user, nice, system, idle, iowait, irq, softirq, steal = fields
    return Snapshot(at, (user + nice + system + irq + softirq) / ticks,
                    (idle + iowait) / ticks, steal / ticks, cpus, own_counts())


def own_counts():
    """This process's page faults and context switches so far, or None."""
    if resource is None:
        return None
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return Counts(usage.ru_minflt, usage.ru_majflt, usage.ru_nvcsw,
                  usage.ru_nivcsw)


def window_block(start, end, own_cpu_s):
    """The host's CPU time between two snapshots, less `own_cpu_s` (this
    process's, all its threads): the `host_cpu` block of a timing block,
    or None where either snapshot or the own time is missing."""
    if start is None or end is None or own_cpu_s is None:
        return None
    busy = end.busy_s - start.busy_s
    # Ticks against the process clock's nanoseconds: a host with nothing
    # else running can come out a tick or two below the process's own.
    return {"window_s": round(end.at - start.at, 6),
            "cpus": end.cpus,
            "others_cpu_s": round(max(0.0, busy - own_cpu_s), 2),
            "steal_s": round(max(0.0, end.steal_s - start.steal_s), 2),
            "idle_s": round(max(0.0, end.idle_s - start.idle_s), 2)}


def counts_block(start, end):
    """This process's page faults and context switches between two
    snapshots (an involuntary switch: a thread of it preempted), the
    `process_counts` block of a timing block; None where either is
    missing."""
    if start is None or end is None or start.own is None or end.own is None:
        return None
    return dict((name, after - before) for name, before, after
                in zip(Counts._fields, start.own, end.own))


def warnings_for(block):
    """Human-readable warnings where the host's load may be in the times."""
    if not block or block["window_s"] < MIN_WINDOW_S:
        return []
    window, cpus = block["window_s"], block["cpus"]
    others = block["others_cpu_s"] / window
    found = []
    if block["idle_s"] / window < IDLE_SPARE * cpus and others >= OTHERS_MIN:
        found.append(
            BUSY + ": other processes used {:.2f} of its {} CPUs and none "
            "stayed idle, so these times may include waiting for a "
            "CPU".format(others, cpus))
    steal = block["steal_s"] / (window * cpus)
    if steal > STEAL_WARNING:
        found.append(
            STOLEN + ": {:.0%} of this machine's CPU time went to another "
            "machine sharing its CPUs".format(steal))
    return found


def is_host_warning(text):
    """Whether `text` is one of warnings_for()'s."""
    return text.startswith((BUSY, STOLEN))
