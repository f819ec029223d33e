"""One job's process here, run to its end under the job's timeout: in its
own session, so that a Ctrl-C reaches dlrepro only, which then stops the
process cleanly (SIGTERM: the harness writes what it measured; SIGKILL to
its whole process group after the grace). The local engine, the grouped
runner and the node entry of every engine run processes through it.

A second Ctrl-C during the grace cuts it short (the process is killed at
once), and a third while it is killed waits until it is gone: a process
a session started is dead and reaped before the session goes on, or lets
go of its run folder, whatever the user presses (interrupts_held)."""
import functools
import os
import signal
import subprocess
import threading
import time
from contextlib import contextmanager
from typing import NamedTuple, Optional

from harness import procstat

# Seconds the harness gets after SIGTERM to write its partial result.
GRACE_S = 30


class Exit(NamedTuple):
    status: Optional[int]
    timed_out: bool
    seconds: float
    # Why the process could not be started at all (None: it started).
    start_error: Optional[str] = None
    # The process's pid (the kernel log names an OOM kill's victim by it).
    pid: Optional[int] = None


def signal_each(pids, signum):
    """`signum` to each of `pids`, those that have ended passed over."""
    for pid in pids:
        try:
            os.kill(pid, signum)
        except OSError:
            pass


class Presses:
    """The Ctrl-Cs interrupts_held has held back: `count`; while `raising`,
    the next one raises KeyboardInterrupt at once (it cuts a wait short),
    and only that one."""

    def __init__(self):
        self.count = 0
        self.raising = False

    def __call__(self, signum, frame):
        self.count += 1
        if self.raising:
            self.raising = False
            raise KeyboardInterrupt


@contextmanager
def interrupts_held(then_raise=True):
    """Ctrl-C held back while the block runs (a kill and its reaping, a
    container's removal, run.json's last word); yields the Presses. A
    KeyboardInterrupt once the block has ended, when one came and
    `then_raise` (else dropped: the caller is ending the run for an
    earlier one already). Outside the main thread, where Python delivers
    no Ctrl-C, a plain block."""
    presses = Presses()
    if threading.current_thread() is not threading.main_thread():
        yield presses
        return
    previous = signal.signal(signal.SIGINT, presses)
    try:
        yield presses
    finally:
        signal.signal(signal.SIGINT, signal.SIG_DFL if previous is None
                      else previous)
    if presses.count and then_raise:
        raise KeyboardInterrupt


class Processes:
    """Starts, waits for and stops a job's processes. A test may replace
    `wait` to time a job out on an event instead of the clock."""
    # In the child, before exec: SIGTERM if dlrepro dies, even by SIGKILL,
    # so an orphaned harness writes what it measured and stops instead of
    # running on beside a resumed run.
    child_setup = staticmethod(procstat.die_with_parent)
    # Whether a Ctrl-C cut a stop's grace short and a process was killed
    # without writing what it measured: the run's last line says so.
    killed_on_interrupt = False

    @property
    def grace_s(self):
        return GRACE_S  # read when asked: a test may shorten it

    def run(self, launch, log_path, timeout_s, inherited=()):
        """Run one launch to its end; an Exit. KeyboardInterrupt stops the
        process first, then propagates. `inherited`: descriptors the
        process keeps open (the run folder's lock)."""
        started = time.monotonic()
        with open(log_path, "ab") as log:
            try:
                proc = subprocess.Popen(launch.argv, env=launch.env,
                                        cwd=launch.cwd, stdout=log,
                                        stderr=subprocess.STDOUT,
                                        stdin=subprocess.DEVNULL,
                                        start_new_session=True,
                                        pass_fds=inherited,
                                        preexec_fn=functools.partial(
                                            self.child_setup, os.getpid()))
            except OSError as exc:
                return Exit(None, False, time.monotonic() - started,
                            f"{launch.argv[0]}: {exc.strerror or exc}")
            try:
                status, timed_out = self.wait(proc, timeout_s), False
            except subprocess.TimeoutExpired:
                self.stop(proc, launch)
                status, timed_out = proc.returncode, True
            except BaseException:
                self.stop(proc, launch)
                raise
        return Exit(status, timed_out, time.monotonic() - started,
                    pid=proc.pid)

    def wait(self, proc, timeout_s):
        """The process's exit status, or subprocess.TimeoutExpired once
        its timeout has passed."""
        return proc.wait(timeout_s)

    def stop(self, proc, launch, ask=None):
        """Ask the harness to stop (`ask`; by default SIGTERM, or the
        launch's own stop: it writes a partial result), then kill it if it
        has not within the grace. A Ctrl-C meanwhile cuts the grace short
        (the user insists), and any after it waits for the kill: the
        process is dead and reaped when this returns or raises (then
        KeyboardInterrupt, for the Ctrl-C)."""
        with interrupts_held() as presses:
            try:
                try:
                    presses.raising = True
                    self._ask(proc, launch, ask)
                    proc.wait(self.grace_s)
                finally:
                    presses.raising = False
            except (subprocess.TimeoutExpired, ProcessLookupError,
                    KeyboardInterrupt):
                pass
            if presses.count and ask is None and proc.poll() is None:
                # A job stopped mid-measure (not a worker between cells)
                # is killed before it wrote what it measured.
                self.killed_on_interrupt = True
            self.kill(proc, launch)

    @staticmethod
    def _ask(proc, launch, ask):
        if ask is not None:
            ask()
        elif launch.stop is not None:
            launch.stop()
        else:
            os.killpg(proc.pid, signal.SIGTERM)

    @staticmethod
    def kill(proc, launch):
        """SIGKILL to the process's whole group (and its container, through
        the launch's kill), then reap it; nothing once it has ended."""
        if proc.poll() is not None:
            return
        if launch.kill is not None:
            launch.kill()
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait()
