"""Processes a test starts: Ctrl-C reaches them whatever the test runner's
own SIGINT, and none outlives its test (tests/conftest.py ends what a test
left running, pass or fail)."""
import os
import signal
import subprocess

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


def end(proc, group=False):
    """Kill `proc` (its process group when `group`) unless it has ended,
    reap it and close its pipes. A group whose leader has been reaped is
    left alone: its id may since name someone else's."""
    if proc.poll() is None:
        try:
            if group:
                os.killpg(proc.pid, signal.SIGKILL)
            else:
                proc.kill()
        except ProcessLookupError:
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
