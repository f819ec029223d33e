"""Talking to Slurm: its client commands (sbatch, sacct, scontrol,
scancel, sinfo) and parsers of what they say."""
import shutil
import subprocess
from pathlib import Path
from typing import NamedTuple, Optional

from dlrepro.errors import UserError
from dlrepro.run import store

# States in which a task may still run (or run again).
ACTIVE = {"PENDING", "RUNNING", "CONFIGURING", "COMPLETING", "SUSPENDED",
          "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "RESIZING", "SIGNALING",
          "STAGE_OUT", "STOPPED", "RESV_DEL_HOLD"}


def command(name):
    found = shutil.which(name)
    if found is None:
        raise UserError(f"{name} not found on PATH: the Slurm executor needs "
                        f"Slurm's client commands (sbatch, squeue, scontrol, "
                        f"scancel); nothing was submitted")
    return found


def run(argv, timeout=60):
    try:
        return subprocess.run(argv, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True,
                              timeout=timeout, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        raise UserError(f"{Path(argv[0]).name} did not answer within "
                        f"{timeout} s; is slurmctld up?")


def last_line(text):
    """Slurm's last error line (its last line when none says error)."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    errors = [line for line in lines if "error" in line.lower()
              or "unrecognized" in line]
    return (errors or lines or ["(no message)"])[-1]


def task_ids(text):
    """Array indices of a task range as Slurm writes it: `3`, `0-7%2`,
    `[1,3-4]`."""
    text = text.strip("[]").split("%")[0]
    indices = []
    for part in text.split(","):
        if "-" in part:
            low, high = part.split("-", 1)
            indices += range(int(low), int(high) + 1)
        elif part.isdigit():
            indices.append(int(part))
    return indices


class TaskState(NamedTuple):
    state: str                      # first word of Slurm's state
    reason: Optional[str] = None
    node: Optional[str] = None
    exit_code: Optional[str] = None
    detail: Optional[str] = None    # Slurm's state as written ("CANCELLED by 0")
    source: Optional[str] = None    # who said so: "sacct" or "scontrol"


def states(tasks):
    """{(array job id, task index): TaskState} for those of `tasks` (the
    (array job id, task index) keys the caller waits on) and their
    arrays' other tasks that Slurm still knows: sacct where accounting is
    on, else `scontrol show job`. An array sacct does not know yet
    (slurmctld hands new jobs to slurmdbd a moment after sbatch returns)
    is asked of scontrol, so that a task just submitted is never taken
    for one gone; so is a task sacct says has ended, in case slurmctld is
    still completing it, and a task of `tasks` that sacct's answer
    lacks."""
    tasks = set(tasks)
    array_ids = sorted({array_id for array_id, _ in tasks})
    if not array_ids:
        return {}
    found = _sacct(array_ids)
    if found is None:
        found = {}
    known = {array_id for array_id, _ in found}
    ended = {array_id for (array_id, _), task in found.items()
             if task.state not in ACTIVE}
    # sacct's answer is a snapshot of slurmdbd's records: while an array's
    # last pending task starts, its pending remainder may be missing from
    # it (ReFrame met the same, reframe-hpc/reframe#3707).
    lacking = {array_id for array_id, index in tasks
               if (array_id, index) not in found}
    for array_id in array_ids:
        if array_id not in known:
            found.update(_scontrol(array_id))
        elif (array_id in ended or array_id in lacking) and \
                shutil.which("scontrol"):
            # sacct records a task's end as soon as slurmctld signals it;
            # slurmctld keeps it COMPLETING until its processes are gone
            # (the harness writing what it measured, within KillWait).
            # Until then the task is not over.
            for key, task in _scontrol(array_id).items():
                if key not in found or (array_id in ended
                                        and task.state in ACTIVE):
                    found[key] = task
    return found


def _sacct(array_ids):
    sacct = shutil.which("sacct")
    if sacct is None:
        return None
    proc = run([sacct, "-n", "-P", "-X", "-j", ",".join(array_ids), "-o",
                 "JobID,State,Reason,NodeList,ExitCode"])
    if proc.returncode != 0 or "disabled" in proc.stderr + proc.stdout:
        return None
    found = {}
    for line in proc.stdout.splitlines():
        fields = line.split("|")
        if len(fields) < 5 or "_" not in fields[0]:
            continue
        array_id, tasks = fields[0].split("_", 1)
        # sacct's NodeList of a task not started yet: "None assigned".
        node = None if fields[3] in ("", "None assigned") else fields[3]
        state = TaskState(fields[1].split()[0], fields[2] or None, node,
                          fields[4] or None, fields[1], "sacct")
        for index in task_ids(tasks):
            found[(array_id, index)] = state
    return found


def _scontrol(array_id):
    proc = run([command("scontrol"), "show", "job", "-o", array_id])
    found = {}
    if proc.returncode != 0:
        return found  # gone from slurmctld's memory (MinJobAge)
    for line in proc.stdout.splitlines():
        fields = dict(token.split("=", 1) for token in line.split()
                      if "=" in token)
        if fields.get("ArrayJobId") != array_id or "ArrayTaskId" not in fields:
            continue
        node = fields.get("NodeList")
        state = TaskState(fields.get("JobState", "UNKNOWN"),
                          fields.get("Reason"),
                          None if node in (None, "(null)") else node,
                          fields.get("ExitCode"), fields.get("JobState"),
                          "scontrol")
        for index in task_ids(fields["ArrayTaskId"]):
            found[(array_id, index)] = state
    return found


def largest_node(partition=None):
    """(CPUs, GPUs) of the largest node of the partition (the default one
    when None): what a cell may ask for, in place of this host's."""
    argv = [command("sinfo"), "-h", "-o", "%c|%G"]
    if partition:
        argv += ["-p", partition]
    proc = run(argv)
    if proc.returncode != 0 or not proc.stdout.strip():
        where = f"partition {partition!r}" if partition else \
            "the default partition"
        said = last_line(proc.stderr) if proc.stderr.strip() else "no nodes"
        raise UserError(f"Slurm has no nodes in {where} (sinfo: {said}); "
                        f"nothing was submitted")
    cpus = gpus = 0
    for line in proc.stdout.splitlines():
        count, _, gres = line.partition("|")
        if count.strip().rstrip("+").isdigit():
            cpus = max(cpus, int(count.strip().rstrip("+")))
        for item in gres.split(","):
            parts = item.split("(")[0].split(":")
            if parts[0] == "gpu" and parts[-1].isdigit():
                gpus = max(gpus, int(parts[-1]))
    return cpus, gpus


def live_line(record):
    """One line on a Slurm run's unfinished jobs as Slurm sees them now
    (None for a local run, or when every job has ended)."""
    open_jobs = [e for e in record["jobs"] if e.get("slurm")
                 and e["status"] not in store.DONE_STATUSES]
    if record.get("executor") != "slurm" or not open_jobs:
        return None
    try:
        known = states((e["slurm"]["array_job_id"],
                        e["slurm"]["array_task_id"]) for e in open_jobs)
    except UserError as exc:
        return f"slurm: cannot ask Slurm ({exc})"
    counts = {}
    for entry in open_jobs:
        task = known.get((entry["slurm"]["array_job_id"],
                          entry["slurm"]["array_task_id"]))
        if task is None or task.state not in ACTIVE:
            continue
        counts[task.state.lower()] = counts.get(task.state.lower(), 0) + 1
    if not counts:
        return None
    return ("slurm now: " + ", ".join(f"{n} {s}" for s, n in
                                      sorted(counts.items()))
            + "; `--resume` with the run's command waits for them")


def cancel(array_ids):
    if array_ids:
        run([command("scancel")] + sorted(array_ids))
