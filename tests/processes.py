"""Processes a test starts: Ctrl-C reaches them whatever the test runner's
own SIGINT, and none outlives its test (tests/conftest.py ends what a test
left running, pass or fail)."""
import os
import signal
import subprocess
from pathlib import Path

import waits
from dlrepro.run import process
from harness import procstat

_STARTED = []


def sigint_at_default():
    """In the child, before exec: SIGINT at its default. A test runner
    started with SIGINT ignored (a background job of a non-interactive
    shell is) passes SIG_IGN on to every process it starts; Python then
    installs no KeyboardInterrupt handler, and the Ctrl-C a test sends is
    lost."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def start(argv, **popen_kwargs):
    """subprocess.Popen(argv, ...) with SIGINT at its default, ended when
    the test ends if it is still running (its whole process group when
    it was started in a session of its own)."""
    proc = subprocess.Popen(argv, preexec_fn=sigint_at_default,
                            **popen_kwargs)
    _STARTED.append((proc, bool(popen_kwargs.get("start_new_session"))))
    return proc


# How long a process gets to end after SIGTERM before SIGKILL: the docker
# client of an image's Python passes SIGTERM on to its container, while
# its SIGKILL would leave the container running.
GRACE_S = 30


def end(proc, group=False):
    """SIGTERM to `proc` (its process group when `group`) unless it has
    ended, SIGKILL after GRACE_S; reap it and close its pipes. A group
    whose leader has been reaped is left alone: its id may since name
    someone else's."""
    for signum in (signal.SIGTERM, signal.SIGKILL):
        if proc.poll() is not None:
            break
        try:
            if group:
                os.killpg(proc.pid, signum)
            else:
                proc.send_signal(signum)
        except ProcessLookupError:
            pass
        try:
            proc.wait(GRACE_S)
        except subprocess.TimeoutExpired:
            pass
    proc.wait()
    for stream in (proc.stdin, proc.stdout, proc.stderr):
        if stream is not None:
            stream.close()


def mark():
    """Where the processes a test is about to start begin (for end_since)."""
    return len(_STARTED)


def end_since(marked):
    """End every process start() started since mark() said `marked`."""
    while len(_STARTED) > marked:
        end(*_STARTED.pop())


signal_each = process.signal_each


def _status(pid):
    """{field: value} of /proc/PID/status; empty once it is gone."""
    try:
        with open(f"/proc/{pid}/status") as handle:
            lines = handle.read().splitlines()
    except OSError:
        return {}
    return dict(line.split(":\t", 1) for line in lines if ":\t" in line)


def is_stopped(pid):
    """Whether `pid` is stopped (SIGSTOP taken, not just sent), or gone."""
    return _status(pid).get("State", "T").startswith(("T", "Z", "X"))


def stop_each(pids):
    """SIGSTOP to each of `pids`, and wait until each is stopped (not just
    sent the signal: one sent SIGTERM meanwhile would still take it)."""
    signal_each(pids, signal.SIGSTOP)
    waits.wait_for(lambda: all(is_stopped(pid) for pid in pids),
                   what=f"{pids} stopped")


def pending(pid, signum):
    """Whether `signum` waits, not yet delivered, for process `pid` (as a
    stopped process keeps the SIGTERM sent to it); False once it is gone."""
    status = _status(pid)
    return any(int(status.get(field, "0"), 16) & (1 << (signum - 1))
               for field in ("SigPnd", "ShdPnd"))


def wait_gone(pids, seconds=120):
    """Wait until none of `pids` is alive (a process another one reaps)."""
    waits.wait_for(lambda: not [pid for pid in pids
                                if os.path.exists(f"/proc/{pid}")],
                   seconds, what=f"processes {pids} to end")


def children_of(pid):
    """This host's processes whose parent is `pid`."""
    found = []
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            if procstat.parent_of(entry.name) == pid:
                found.append(int(entry.name))
        except OSError:
            continue  # ended meanwhile
    return found
