"""The local engine: one job at a time on this host, under the job's
timeout, in its own session so that a Ctrl-C reaches dlrepro only, which
then stops the job cleanly. A Slurm task runs its one job with it too."""
import ctypes
import os
import signal
import subprocess
import time
from typing import NamedTuple, Optional

from harness.blocks import utc_now

from dlrepro.run import writer
from dlrepro.run.engines.base import Engine
from dlrepro.run.engines.grouped import Grouped

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


def _term_when_parent_dies():
    """In the child, before exec: SIGTERM if dlrepro dies (even by
    SIGKILL), so an orphaned harness writes what it measured and stops
    instead of running on beside a resumed run."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


def stop(proc, launch, grace_s=None):
    """Ask the harness to stop (SIGTERM: it writes a partial result), then
    kill its whole process group if it does not."""
    grace_s = GRACE_S if grace_s is None else grace_s
    try:
        if launch.stop is not None:
            launch.stop()
        else:
            os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(grace_s)
    except (subprocess.TimeoutExpired, ProcessLookupError):
        pass
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait()


class LocalEngine(Engine):
    name = "local"
    # What the group runner (engines/grouped.py) shares with a job's own
    # process: how its end is told, how it is stopped, how it starts.
    exit_type = Exit
    stop = staticmethod(stop)
    child_setup = staticmethod(_term_when_parent_dies)

    def execute(self, context):
        """Each job in turn, run.json written after each; a job whose
        isolation is `group` through its group's worker."""
        grouped = Grouped(self, context) if any(
            job.isolation == "group" for job in context.jobs) else None

        def launch(job):
            if job.isolation == "group":
                return grouped.launch(job)
            if grouped:
                # No worker idles beside a process of its own, holding
                # memory and a thread it may want.
                grouped.close()
            return context.launch(job, self)
        by_id = context.entries()
        total = len(context.jobs)
        try:
            for index, job in enumerate(context.jobs, 1):
                entry = by_id[job.id]
                if job.id not in context.done:
                    context.events.start(index, total, job)
                    self._run_one(job, entry, context, launch)
                    context.save()
                context.events.finish(index, total, job, entry)
        finally:
            if grouped:
                grouped.close()
        return "complete"

    def _run_one(self, job, entry, context, launch):
        entry["started_at"] = utc_now()
        started = time.monotonic()
        result = context.cannot_run(job) or launch(job)
        writer.end_entry(entry, result,
                         wall_s=round(time.monotonic() - started, 3))

    def grace_s(self):
        return GRACE_S

    def run(self, launch, log_path, timeout_s):
        """Run one launch to its end; an Exit. KeyboardInterrupt stops the
        job first, then propagates."""
        started = time.monotonic()
        with open(log_path, "ab") as log:
            try:
                proc = subprocess.Popen(launch.argv, env=launch.env,
                                        cwd=launch.cwd, stdout=log,
                                        stderr=subprocess.STDOUT,
                                        stdin=subprocess.DEVNULL,
                                        start_new_session=True,
                                        preexec_fn=_term_when_parent_dies)
            except OSError as exc:
                return Exit(None, False, time.monotonic() - started,
                            f"{launch.argv[0]}: {exc.strerror or exc}")
            try:
                status, timed_out = self.wait(proc, timeout_s), False
            except subprocess.TimeoutExpired:
                stop(proc, launch)
                status, timed_out = proc.returncode, True
            except BaseException:
                stop(proc, launch)
                raise
        return Exit(status, timed_out, time.monotonic() - started,
                    pid=proc.pid)

    def wait(self, proc, timeout_s):
        """The job's exit status, or subprocess.TimeoutExpired once its
        timeout has passed. (A test's executor may time a job out on an
        event instead: its workers inside training, however long a loaded
        machine takes to get them there.)"""
        return proc.wait(timeout_s)
