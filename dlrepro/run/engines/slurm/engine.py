"""The Slurm engine: a run's jobs as Slurm job arrays, one array task per
job of isolation `cell`, one per group of jobs of isolation `group`, on
whatever nodes Slurm gives (docs/slurm.md).

Submit and collect are split. Submitting writes each job's spec file and
one submission file per array (submit.py), checks every array with
`sbatch --test-only`, then queues them. Waiting (watch.py) polls Slurm
and ends each job when its task ends.

Only the submitting process writes run.json (tasks write their own result
files), so a run can be left queued (--no-wait, or a killed submitter) and
picked up again by --resume, which waits for the tasks still in Slurm and
submits only the jobs that are missing or failed.
"""
from dlrepro.errors import UserError
from dlrepro.run import groups, runrecord
from dlrepro.run.engines.base import Engine
from dlrepro.run.engines.slurm import client, environment, submit
from dlrepro.run.engines.slurm.options import Options
from dlrepro.run.engines.slurm.options import options as options_from
from dlrepro.run.engines.slurm.watch import POLL_S, Watch


class SlurmEngine(Engine):
    name = "slurm"
    node_env = staticmethod(environment.from_slurm)
    detached = True
    runs_groups = True

    def __init__(self, options=None, runtime_options=None, wait=True,
                 confirm=None, poll_s=POLL_S):
        self.options = options or Options()
        # What the node side passes to runtimes.get, beside the matrix.
        self.runtime_options = runtime_options or {}
        self.wait = wait
        # Asked on Ctrl-C: "cancel these tasks?" -> bool. None: never
        # cancel (no one to ask).
        self.confirm = confirm
        self.poll_s = poll_s
        # After Ctrl-C: the arrays left queued or running (None: none
        # were being waited for).
        self.left_running = None

    @classmethod
    def from_flags(cls, suite, runtime_options, no_wait, config, **flags):
        return cls(options_from(flags, suite, config), runtime_options,
                   wait=not no_wait)

    def check(self, jobs=(), isolation=groups.DEFAULT):
        """Fail before a run folder exists when Slurm cannot be used or
        rejects what the jobs would ask for (`sbatch --test-only`: a
        partition, account, QOS or resources it refuses; with groups, the
        summed time limit of each group's task). Each job's own
        isolation decides its task; `isolation` is the run's summary."""
        for name in ("sbatch", "scontrol", "scancel"):
            client.command(name)
        if self.options.gpu_freq:
            # Slurm sets the clocks; a cell that sets them too would fight
            # it (and cannot, in a container).
            policies = sorted({j.placement.clock_policy for j in jobs
                               if j.placement.clock_policy != "observe"})
            if policies:
                raise UserError(f"--gpu-freq: Slurm sets the GPU clocks, so "
                                f"cells must only observe them; give "
                                f"--clock-policy observe (cells ask for "
                                f"{', '.join(policies)})")
        submit.test_only(self.options, groups.order(jobs))

    def execute(self, context):
        """Submit the jobs that need running (adopting tasks still in
        Slurm from an earlier submission), then wait for them unless told
        not to."""
        self.check()
        finished, to_submit, waiting = self._sort(context)
        if to_submit:
            self._submit(context, to_submit)
            waiting += to_submit
        if len(waiting) > len(to_submit):
            context.events.log(
                f"{len(waiting) - len(to_submit)} job(s) still in Slurm "
                f"from an earlier submission: waiting for them")
        context.save()
        if not waiting:
            return "complete"
        if not self.wait:
            return "submitted"
        watch = Watch(context, {j.id: j for j in waiting}, finished,
                      self.poll_s)
        try:
            watch.wait()
        except KeyboardInterrupt:
            self.left_running = watch.interrupted(self.confirm)
            raise
        return "complete"

    def _sort(self, context):
        """(jobs ended already, jobs to submit, jobs whose tasks are still
        in Slurm); a job that cannot run ends here at once."""
        by_id = context.entries()
        total = len(context.jobs)
        finished = 0
        live = {(e["slurm"]["array_job_id"], e["slurm"]["array_task_id"])
                for e in context.record["jobs"] if e.get("slurm")}
        known = client.states(live)
        to_submit, waiting = [], []
        for job in context.jobs:
            entry = by_id[job.id]
            if job.id not in context.done:
                result = context.life.unrunnable(job)
                if result is None:
                    block = entry.get("slurm")
                    task = known.get((block["array_job_id"],
                                      block["array_task_id"])) \
                        if block else None
                    # Still queued or running: adopt it.
                    (waiting if task is not None and task.state in
                     client.ACTIVE else to_submit).append(job)
                    continue
                runrecord.end_entry(entry, result)
                entry.pop("slurm", None)
            finished += 1
            context.events.finish(finished, total, job, entry)
        return finished, to_submit, waiting

    def _submit(self, context, jobs):
        for job in jobs:
            context.life.prepare(job)
        blocks = submit.submit(self.options, self.runtime_options, jobs,
                               context.life.runtime.name, context.run_dir,
                               context.record)
        by_id = context.entries()
        for job in jobs:
            by_id[job.id].update(runrecord.new_entry(job),
                                 slurm=blocks[job.id])
        ids = sorted({blocks[j.id]["array_job_id"] for j in jobs})
        in_groups = [j for j in jobs if j.isolation in groups.SERVED]
        tasks = len({blocks[j.id]["job_id"] for j in in_groups})
        said = f" ({len(in_groups)} of them in {tasks} task(s), one per " \
            f"group)" if in_groups else ""
        context.events.log(f"submitted {len(jobs)} job(s) to Slurm as "
                           f"array job(s) {', '.join(ids)}{said}")

    def stopped(self):
        left = self.left_running
        if left:
            return f"Slurm job(s) {', '.join(left)} left queued or running"
        return "its queued and running Slurm tasks were cancelled"
