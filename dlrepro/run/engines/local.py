"""The local engine: one job at a time on this host, each in its own
process (run/process.py) under its timeout, or a group's jobs in one
worker (engines/grouped.py)."""
import time

from harness.blocks import utc_now

from dlrepro.run import groups, runrecord
from dlrepro.run.engines.base import Engine
from dlrepro.run.engines.grouped import Grouped
from dlrepro.run.process import Processes


class LocalEngine(Engine):
    name = "local"
    runs_groups = True

    def __init__(self, processes=None):
        # How a job's process is run and stopped (a test may time a job
        # out on an event instead of the clock).
        self.processes = processes or Processes()

    def execute(self, context):
        """Each job in turn, run.json written after each; a job whose
        isolation is `group` or `fork` through its key's worker."""
        life = context.life
        grouped = Grouped(self.processes, life, context.events) if any(
            job.isolation in groups.SERVED for job in context.jobs) else None

        def run(job):
            if job.isolation in groups.SERVED:
                return grouped.launch(job)
            if grouped:
                # No worker idles beside a process of its own, holding
                # memory and a thread it may want.
                grouped.close()
            return life.run(job)
        by_id = context.entries()
        total = len(context.jobs)
        try:
            for index, job in enumerate(context.jobs, 1):
                entry = by_id[job.id]
                if job.id not in context.done:
                    context.events.start(index, total, job)
                    entry["started_at"] = utc_now()
                    started = time.monotonic()
                    result = life.unrunnable(job) or run(job)
                    runrecord.end_entry(entry, result, wall_s=round(
                        time.monotonic() - started, 3))
                    context.save()
                context.events.finish(index, total, job, entry)
        finally:
            if grouped:
                grouped.close()
        return "complete"

    def stopped(self):
        if self.processes.killed_on_interrupt:
            # A second Ctrl-C, or the first during a timeout's stop.
            return ("the running job was killed (Ctrl-C during its stop's "
                    "grace) before it could write what it had measured")
        return super().stopped()
