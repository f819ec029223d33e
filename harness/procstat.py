"""A process's /proc/PID/stat, read where Linux offers it. Standard library
only."""
import os


def stat_fields(pid="self", proc="/proc"):
    """The fields of /proc/PID/stat after the command name, so that index 0
    is field 3 (the state), 1 the parent's pid, 19 the start time in clock
    ticks since boot. The command name may hold spaces and parentheses:
    fields are counted after its last closing one. OSError where there is
    no such process (or no /proc)."""
    with open(os.path.join(proc, str(pid), "stat")) as handle:
        stat = handle.read()
    return stat[stat.rindex(")") + 2:].split()


def parent_of(pid, proc="/proc"):
    """PID's parent's pid (0 where it lies outside this pid namespace);
    OSError where PID has gone."""
    return int(stat_fields(pid, proc)[1])


def is_ancestor(pid, proc="/proc"):
    """Whether PID is this process's parent, or its parent's, and so on up
    to the first process; None where /proc cannot say (not Linux)."""
    if not os.path.isdir(os.path.join(proc, "self")):
        return None
    current = os.getppid()
    while True:
        if current == pid:
            return True
        if current <= 1:
            return False
        try:
            current = parent_of(current, proc)
        except (OSError, ValueError, IndexError):
            # An ancestor that ended while we looked: this process has
            # been handed to another one, so PID is no longer above it.
            return False
