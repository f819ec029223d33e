"""A process's place among its parents, where Linux offers it: its
/proc/PID/stat read, and the signal it asks for when its parent dies.
Standard library only."""
import ctypes
import os
import signal

_PR_SET_PDEATHSIG = 1


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


def signal_when_parent_dies(signum=signal.SIGTERM):
    """Ask the kernel for `signum` when this process's parent dies, even by
    SIGKILL (Linux; elsewhere a no-op)."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signum)
    except (OSError, AttributeError):
        pass


def die_with_parent(parent, signum=signal.SIGTERM):
    """In a child of `parent`, before or after exec: `signum` when the parent
    dies; and at once where it died between the fork and this request,
    which would then never fire (the child has been handed to another
    parent)."""
    signal_when_parent_dies(signum)
    if os.getppid() != parent:
        os.kill(os.getpid(), signum)
