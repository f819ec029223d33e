"""One Slurm array task: run ONE job of a run on the node Slurm chose, the
way a local run runs it (runtime.launch, the local engine, collect), and add
to its result where it ran: the Slurm job and array ids, the node, the
allocation (SLURM_*), the CPUs and GPUs the task was given, and the
--gpu-freq asked beside the clocks telemetry saw.

    python -m dlrepro.run.slurmtask RUN_DIR SUBMISSION_JSON

The job is the submission's jobs[SLURM_ARRAY_TASK_ID]. Slurm's SIGTERM (a
cancel, the time limit, a node going down) stops the job as Ctrl-C does
locally: the harness gets SIGTERM and writes what it measured; the
submitting side then records why from Slurm.
"""
import json
import os
import signal
import sys
import time
from pathlib import Path

from dlrepro import matrix as matrix_mod
from dlrepro.errors import UserError
from dlrepro.run import pipeline, runfolder, runtimes, writer
from dlrepro.run.engines.local import LocalEngine
from dlrepro.run.job import Job, Placement


class Stopped(Exception):
    """Slurm sent SIGTERM."""


def _stop(signum, frame):
    # Once: Slurm may signal again, and a second Stopped raised while the
    # harness writes its partial result would end this task, and with it
    # (its step over) the harness.
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    raise Stopped()


def job_of(document):
    return Job(id=document["id"], kind=document["kind"],
               spec=document["spec"], timeout_s=document["timeout_s"],
               placement=Placement(*document["placement"]),
               mounts=tuple(document["mounts"]))


def where():
    """The Slurm block of a result, from the task's environment."""
    env = os.environ
    array_id = env.get("SLURM_ARRAY_JOB_ID")
    index = env.get("SLURM_ARRAY_TASK_ID")
    try:
        cpus = sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cpus = None
    return {
        "job_id": f"{array_id}_{index}",
        "array_job_id": array_id,
        "array_task_id": int(index) if index is not None else None,
        "slurm_job_id": env.get("SLURM_JOB_ID"),
        "node": env.get("SLURMD_NODENAME"),
        "partition": env.get("SLURM_JOB_PARTITION"),
        "allocation": {k: v for k, v in sorted(env.items())
                       if k.startswith("SLURM")},
        "placement": {
            "cpus": cpus,
            "gpus": env.get("CUDA_VISIBLE_DEVICES",
                            env.get("SLURM_JOB_GPUS")),
        },
    }


def seen_clocks(result):
    """SM clocks telemetry saw over the timed iterations, per GPU."""
    telemetry = result.get("telemetry") or {}
    return [{"index": g.get("index"), "sm_clock_mhz": g.get("sm_clock_mhz")}
            for g in telemetry.get("gpus") or []] or None


def annotate(path, block, gpu_freq, wall_s, result=None):
    """Add the Slurm block to the job's result (`result`, not yet written,
    else the valid file at `path`) and write it: the one write after the
    harness's. An invalid file is left for the submitting side to judge."""
    if result is None:
        result, problem = runfolder.read_result(path)
    if result is None:
        return
    writer.annotated(path, "slurm", dict(
        block, wall_s=round(wall_s, 3),
        gpu_freq={"asked": gpu_freq, "seen": seen_clocks(result)}), result)


def main(argv):
    run_dir, submission = Path(argv[0]), json.loads(Path(argv[1]).read_text())
    job = job_of(submission["jobs"][int(os.environ["SLURM_ARRAY_TASK_ID"])])
    path = run_dir / f"{job.id}.json"
    signal.signal(signal.SIGTERM, _stop)
    started = time.monotonic()
    result = None
    try:
        matrix = matrix_mod.load()
        runtime = runtimes.get(submission["runtime"], matrix=matrix,
                               **submission["runtime_options"])
        runtime.check()
        target = job.placement.target
        reason = runtime.prepare([target], log=print).get(target)
        if reason:
            result = writer.synthesized(job, "unsupported", "Unsupported",
                                        reason)
        else:
            result = pipeline.launch_job(job, runtime, LocalEngine(),
                                         run_dir, matrix, write=False)
    except UserError as exc:
        result = writer.synthesized(
            job, "error", "SetupFailed", f"on node "
            f"{os.environ.get('SLURMD_NODENAME')}: {exc}")
    except Stopped:
        print("dlrepro: Slurm stopped this task (SIGTERM)", flush=True)
    finally:
        annotate(path, where(), submission.get("gpu_freq"),
                 time.monotonic() - started, result)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
