"""Submitting to Slurm: jobs grouped into arrays by what each task asks
for, their sbatch arguments and batch scripts, one submission file per
array for the node side (dlrepro.run.node), and `sbatch --test-only`
before anything is queued."""
import math
import shlex
import sys
from pathlib import Path
from typing import NamedTuple

from harness import resultfile
from harness.blocks import utc_now

from dlrepro import ROOT
from dlrepro.errors import UserError
from dlrepro.run.engines import local
from dlrepro.run.engines.slurm import client

SLURM_DIR = "slurm"


def _job_document(job):
    return {"id": job.id, "kind": job.kind, "spec": job.spec,
            "timeout_s": job.timeout_s, "placement": list(job.placement),
            "mounts": [str(m) for m in job.mounts]}


def _minutes(seconds):
    return max(1, math.ceil(seconds / 60))


class Array(NamedTuple):
    """One sbatch --array: jobs that ask for the same resources."""
    jobs: list
    resources: tuple                # sbatch arguments for each task


def arrays(jobs):
    """The jobs grouped by what each task asks Slurm for: cores from the
    cell's threads, GPUs from its GPU count."""
    groups = {}
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
        groups.setdefault(tuple(resources), []).append(job)
    return [Array(group, resources) for resources, group in groups.items()]


def multinode(array):
    return array.jobs[0].nodes > 1


def test_only(options, jobs):
    """Fail before a run folder exists when Slurm rejects what the jobs
    would ask for (a partition, account, QOS or resources it refuses)."""
    for array in arrays([j for j in jobs if not j.skip_reason]):
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
    limit = o.time_limit or _minutes(timeout_s + local.GRACE_S + 600)
    args.append(f"--time={limit}")
    args += list(array.resources)
    args += list(o.sbatch)
    return args


def script(run_dir, submission, array=None):
    args = f"{shlex.quote(str(run_dir))} {shlex.quote(str(submission))}"
    head = (f"#!/bin/sh\n# dlrepro: one job of {submission.name} per "
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


def submit(options, runtime_options, jobs, runtime_name, run_dir,
           record):
    """Queue the jobs as arrays; every array is checked with
    --test-only first, so a rejection queues nothing. Returns
    {job id: slurm block for run.json}."""
    sbatch = client.command("sbatch")
    folder = Path(run_dir) / SLURM_DIR
    folder.mkdir(exist_ok=True)
    slurm = record.setdefault("slurm", {"arrays": []})
    slurm["options"] = options._asdict()
    first = len(slurm["arrays"])
    planned = []
    for job in jobs:
        # A resubmitted multi-node job: its other nodes' results from
        # the earlier try must not be folded into this one's.
        for stale in (Path(run_dir) / "nodes").glob(f"{job.id}.node*"):
            stale.unlink()
    for n, array in enumerate(arrays(jobs), first):
        submission = folder / f"submit-{n}.json"
        resultfile.write_atomic(str(submission), {
            "runtime": runtime_name,
            "runtime_options": runtime_options,
            "gpu_freq": options.gpu_freq,
            "jobs": [_job_document(j) for j in array.jobs]})
        batch = folder / f"submit-{n}.sh"
        batch.write_text(script(run_dir, submission, array))
        throttle = (f"%{options.array_throttle}"
                    if options.array_throttle else "")
        argv = [sbatch, f"--array=0-{len(array.jobs) - 1}{throttle}"] + \
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
        slurm["arrays"].append({"array_job_id": array_id,
                                "submitted_at": utc_now(),
                                "jobs": [j.id for j in array.jobs],
                                "sbatch": argv[1:]})
        for index, job in enumerate(array.jobs):
            blocks[job.id] = {"job_id": f"{array_id}_{index}",
                              "array_job_id": array_id,
                              "array_task_id": index, "state": "PENDING",
                              "reason": None, "node": None}
    return blocks
