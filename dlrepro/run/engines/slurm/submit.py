"""Submitting to Slurm: jobs grouped into arrays by what each task asks
for, their sbatch arguments and batch scripts, one submission file per
array for the node side (dlrepro.run.node), and `sbatch --test-only`
before anything is queued.

A job whose isolation is `group` runs in an array task with the rest of
its group (dlrepro.run.groups: jobs with equal process-wide fields,
consecutive in groups.order), in one harness worker; the submission file's
`tasks` lists each task's job ids, and the task's time limit is the sum of
its cells' limits. A `cell` job is an array task of its own, in an array
of such tasks. One submission may queue both kinds (each framework's
default mode). A job on several nodes is always a task of its own."""
import math
import shlex
import sys
from pathlib import Path
from typing import NamedTuple, Optional

from harness import resultfile
from harness.blocks import utc_now

from dlrepro import ROOT
from dlrepro.errors import UserError
from dlrepro.run import groups
from dlrepro.run import process
from dlrepro.run.engines.slurm import client
from dlrepro.run.engines.slurm.options import Options
from dlrepro.run.paths import JobPaths

SLURM_DIR = "slurm"


def _job_document(job):
    return {"id": job.id, "kind": job.kind, "spec": job.spec,
            "timeout_s": job.timeout_s, "placement": list(job.placement),
            "mounts": [str(m) for m in job.mounts],
            # The node's runner starts a fork server or a group worker by it.
            "isolation": job.isolation}


def _minutes(seconds):
    return max(1, math.ceil(seconds / 60))


class Array(NamedTuple):
    """One sbatch --array: jobs that ask for the same resources."""
    jobs: list
    resources: tuple                # sbatch arguments for each task
    # Each task's jobs, a group in one worker; None: one job per task.
    tasks: Optional[list] = None

    def task_jobs(self):
        return self.tasks or [[job] for job in self.jobs]


def arrays(jobs, options=None):
    """The jobs grouped by what each task asks Slurm for: cores from the
    cell's threads, GPUs from its GPU count. Jobs of isolation `cell` a
    task each; those of `group` a task per group, in arrays apart, one
    per time limit too, so that each task's limit is its own group's."""
    cells = [job for job in jobs if job.isolation not in groups.SERVED]
    grouped = [job for job in jobs if job.isolation in groups.SERVED]
    return _arrays(cells, False, options) + _arrays(grouped, True, options)


def _arrays(jobs, grouped, options):
    by_resources = {}
    for job in jobs:
        resources = []
        nodes = job.nodes
        cpus = job.type.cores(job.spec, job.placement)
        if nodes > 1:
            # One task per node, each with its node's share.
            resources += [f"--nodes={nodes}", "--ntasks-per-node=1"]
            cpus = max(1, cpus // nodes) if cpus else None
        if cpus:
            resources.append(f"--cpus-per-task={cpus}")
        if job.placement.device == "gpu":
            gpus = max(job.placement.gpus, 1)
            resources.append(f"--gpus-per-node={max(1, gpus // nodes)}"
                             if nodes > 1 else f"--gpus={gpus}")
        by_resources.setdefault(tuple(resources), []).append(job)
    if not grouped:
        return [Array(group, resources)
                for resources, group in by_resources.items()]
    found = {}
    for resources, group in by_resources.items():
        for task in _tasks(group):
            key = (resources, task_limit(options or Options(), task))
            found.setdefault(key, []).append(task)
    return [Array([j for task in tasks for j in task], resources, tasks)
            for (resources, _limit), tasks in found.items()]


def _tasks(jobs):
    """Jobs of equal resources (so of equal node counts) as tasks: their
    groups; a job on several nodes alone (its nodes each run a harness
    process of their own, in one srun step)."""
    if jobs[0].nodes > 1:
        return [[job] for job in jobs]
    return groups.form(jobs)


def cell_limit_s(options, job):
    """Seconds Slurm gives one cell: --time-limit, else its timeout plus
    the runtime's preparation and the grace after SIGTERM."""
    given = options.time_limit and _slurm_seconds(options.time_limit)
    return given or job.timeout_s + process.GRACE_S + 600


def task_limit(options, jobs):
    """The --time of a task that runs `jobs`: one job's as always (the
    --time-limit as given), a group's the sum of its cells' limits."""
    if len(jobs) == 1:
        return options.time_limit or _minutes(cell_limit_s(options,
                                                            jobs[0]))
    return _minutes(sum(cell_limit_s(options, job) for job in jobs))


def _slurm_seconds(text):
    """Seconds of a Slurm time ("M", "M:S", "H:M:S", "D-H", "D-H:M",
    "D-H:M:S"), or None when it is none of those."""
    days, dash, rest = str(text).rpartition("-")
    parts = rest.split(":")
    if not all(p.isdigit() for p in parts + ([days] if dash else [])):
        return None
    if dash:
        hours, minutes, seconds = (parts + ["0", "0"])[:3]
        units = [int(days) * 86400, int(hours) * 3600, int(minutes) * 60,
                 int(seconds)]
    else:
        scale = {1: (60,), 2: (60, 1), 3: (3600, 60, 1)}.get(len(parts))
        if scale is None:
            return None
        units = [int(p) * s for p, s in zip(parts, scale)]
    return sum(units)


def multinode(array):
    return array.jobs[0].nodes > 1


def test_only(options, jobs):
    """Fail before a run folder exists when Slurm rejects what the jobs
    would ask for (a partition, account, QOS or resources it refuses; a
    group's task, the sum of its cells' time limits)."""
    for array in arrays([j for j in jobs if not j.skip_reason], options):
        argv = [client.command("sbatch"), "--test-only"] + [
            a for a in sbatch_args(options, array, None,
                                   max(j.timeout_s for j in array.jobs))
            if a != "--parsable"] + ["--wrap", "true"]
        proc = client.run(argv)
        if proc.returncode != 0:
            raise UserError(f"Slurm rejects the job: "
                            f"{client.last_line(proc.stderr or proc.stdout)}; "
                            f"nothing was submitted")


def sbatch_args(options, array, run_dir, timeout_s):
    o = options
    args = [f"--chdir={ROOT}", "--no-requeue", "--parsable"]
    if run_dir is not None:
        args = [f"--job-name=dlrepro-{Path(run_dir).name}",
                f"--output={run_dir}/{SLURM_DIR}/%A_%a.out"] + args
    for flag, value in (("partition", o.partition),
                        ("account", o.account), ("qos", o.qos),
                        ("constraint", o.constraint), ("mem", o.mem),
                        ("gpu-freq", o.gpu_freq)):
        if value:
            args.append(f"--{flag}={value}")
    if o.exclusive:
        args.append("--exclusive")
    # The task's own timeout stops a hung job first; Slurm's limit
    # covers preparing the runtime and the grace after SIGTERM too.
    if array.tasks is None:
        limit = o.time_limit or _minutes(timeout_s + process.GRACE_S + 600)
    else:  # the same for every task of a grouped array
        limit = task_limit(o, array.tasks[0])
    args.append(f"--time={limit}")
    args += list(array.resources)
    args += list(o.sbatch)
    return args


def script(run_dir, submission, array=None):
    args = f"{shlex.quote(str(run_dir))} {shlex.quote(str(submission))}"
    head = (f"#!/bin/sh\n# dlrepro: one task of {submission.name} per "
            f"array task\ncd {shlex.quote(str(ROOT))}\n")
    if array is None or not multinode(array):
        return (head + f"exec {shlex.quote(sys.executable)} -m "
                f"dlrepro.run.node slurm {args}\n")
    # One step, one task per node (dlrepro.run.node); a node
    # whose part fails ends the step on every node. The job's outcome
    # is node 0's result (which folds in the other nodes'), so the
    # script itself ends 0 and Slurm's state does not overrule it.
    nodes = array.jobs[0].nodes
    return (head + f"srun --kill-on-bad-exit=1 --nodes={nodes} "
            f"--ntasks={nodes} --ntasks-per-node=1 "
            f"{shlex.quote(sys.executable)} -m dlrepro.run.node slurm "
            f"{args}\necho \"dlrepro: srun ended with status $?\"\n"
            f"exit 0\n")


def _tasks_block(array):
    """A grouped array's job ids per task, for its submission file and
    run.json (the node side runs its task's; the watcher ends them)."""
    if array.tasks is None:
        return {}
    return {"tasks": [[job.id for job in task] for task in array.tasks]}


def submit(options, runtime_options, jobs, runtime_name, run_dir,
           record):
    """Queue the jobs as arrays (a task per `cell` job, per group of
    `group` jobs); every array is checked with --test-only first, so a
    rejection queues nothing. Returns {job id: slurm block for run.json}."""
    sbatch = client.command("sbatch")
    if any(job.isolation in groups.SERVED for job in jobs):
        # The jobs to submit now (a resume's rest) may form other groups
        # than the engine's check saw, of other summed time limits.
        test_only(options, jobs)
    folder = Path(run_dir) / SLURM_DIR
    folder.mkdir(exist_ok=True)
    slurm = record.setdefault("slurm", {"arrays": []})
    slurm["options"] = options._asdict()
    first = len(slurm["arrays"])
    planned = []
    for job in jobs:
        # A resubmitted multi-node job: its other nodes' results from
        # the earlier try must not be folded into this one's.
        for stale in JobPaths(run_dir, job.id).sides():
            stale.unlink()
    for n, array in enumerate(arrays(jobs, options), first):
        submission = folder / f"submit-{n}.json"
        resultfile.write_atomic(str(submission), dict({
            "runtime": runtime_name,
            "runtime_options": runtime_options,
            "gpu_freq": options.gpu_freq,
            "jobs": [_job_document(j) for j in array.jobs]},
            **_tasks_block(array)))
        batch = folder / f"submit-{n}.sh"
        batch.write_text(script(run_dir, submission, array))
        throttle = (f"%{options.array_throttle}"
                    if options.array_throttle else "")
        argv = [sbatch,
                f"--array=0-{len(array.task_jobs()) - 1}{throttle}"] + \
            sbatch_args(options, array, run_dir,
                        max(j.timeout_s for j in array.jobs)) + \
            [str(batch)]
        planned.append((array, argv))
    blocks = {}
    for array, argv in planned:
        proc = client.run(argv)
        if proc.returncode != 0:
            raise UserError(f"sbatch failed: "
                            f"{client.last_line(proc.stderr or proc.stdout)}")
        array_id = proc.stdout.strip().split(";")[0]
        slurm["arrays"].append(dict({
            "array_job_id": array_id, "submitted_at": utc_now(),
            "jobs": [j.id for j in array.jobs], "sbatch": argv[1:]},
            **_tasks_block(array)))
        for index, task in enumerate(array.task_jobs()):
            for job in task:
                blocks[job.id] = {"job_id": f"{array_id}_{index}",
                                  "array_job_id": array_id,
                                  "array_task_id": index,
                                  "state": "PENDING", "reason": None,
                                  "node": None}
    return blocks
