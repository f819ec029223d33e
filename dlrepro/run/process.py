"""One job's process here, run to its end under the job's timeout: in its
own session, so that a Ctrl-C reaches dlrepro only, which then stops the
process cleanly (SIGTERM: the harness writes what it measured; SIGKILL to
its whole process group after the grace). The local engine, the grouped
runner and the node entry of every engine run processes through it."""
import ctypes
import os
import signal
import subprocess
import time
from typing import NamedTuple, Optional

# Seconds the harness gets after SIGTERM to write its partial result.
GRACE_S = 30
_PR_SET_PDEATHSIG = 1


class Exit(NamedTuple):
    status: Optional[int]
    timed_out: bool
    seconds: float
    # Why the process could not be started at all (None: it started).
    start_error: Optional[str] = None
    # The process's pid (the kernel log names an OOM kill's victim by it).
    pid: Optional[int] = None


def term_when_parent_dies():
    """In the child, before exec: SIGTERM if dlrepro dies (even by
    SIGKILL), so an orphaned harness writes what it measured and stops
    instead of running on beside a resumed run."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


class Processes:
    """Starts, waits for and stops a job's processes. A test may replace
    `wait` to time a job out on an event instead of the clock."""
    child_setup = staticmethod(term_when_parent_dies)

    @property
    def grace_s(self):
        return GRACE_S  # read when asked: a test may shorten it

    def run(self, launch, log_path, timeout_s):
        """Run one launch to its end; an Exit. KeyboardInterrupt stops the
        process first, then propagates."""
        started = time.monotonic()
        with open(log_path, "ab") as log:
            try:
                proc = subprocess.Popen(launch.argv, env=launch.env,
                                        cwd=launch.cwd, stdout=log,
                                        stderr=subprocess.STDOUT,
                                        stdin=subprocess.DEVNULL,
                                        start_new_session=True,
                                        preexec_fn=self.child_setup)
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

    def stop(self, proc, launch):
        """Ask the harness to stop (SIGTERM: it writes a partial result),
        then kill its whole process group if it does not."""
        try:
            if launch.stop is not None:
                launch.stop()
            else:
                os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(self.grace_s)
        except (subprocess.TimeoutExpired, ProcessLookupError):
            pass
        if proc.poll() is None:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait()
