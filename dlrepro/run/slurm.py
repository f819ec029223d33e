"""The Slurm executor: a run's jobs as Slurm job arrays, one array task per
job, on whatever nodes Slurm gives.

Submit and collect are split. Submitting writes each job's spec file and
one submission file per array (the jobs and the runtime, for the node
side: dlrepro.run.slurmenv), checks every array with `sbatch --test-only`
(a partition or account Slurm rejects fails before anything is queued),
then queues them. Waiting polls Slurm (sacct, or `scontrol show job` where
accounting is off or sacct does not know a new array yet) and ends each
job when its task ends: the result file the task wrote on the shared
filesystem, or, for a task Slurm cancelled, timed out, preempted, killed
over its memory or lost with its node, a result whose status and reason
come from Slurm, keeping whatever the harness measured first.

Only the submitting process writes run.json (tasks write their own result
files), so a run can be left queued (--no-wait, or a killed submitter) and
picked up again by --resume, which waits for the tasks still in Slurm and
submits only the jobs that are missing or failed.
"""
import math
import re
import shlex
import shutil
import subprocess
import sys
import time
import tomllib
from pathlib import Path
from typing import NamedTuple, Optional

from harness import resultfile
from harness.blocks import utc_now

from dlrepro import ROOT, parse
from dlrepro.errors import UserError
from dlrepro.run import collect, executor as executor_mod, pipeline, runfolder

# States in which a task may still run (or run again).
ACTIVE = {"PENDING", "RUNNING", "CONFIGURING", "COMPLETING", "SUSPENDED",
          "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "RESIZING", "SIGNALING",
          "STAGE_OUT", "STOPPED", "RESV_DEL_HOLD"}
# How a task that ended without a final result of its own ends: Slurm's
# state -> (status, error type, what happened).
ENDINGS = {
    "TIMEOUT": ("timeout", "Timeout", "Slurm stopped the task at its time "
                                      "limit"),
    "DEADLINE": ("timeout", "Timeout", "Slurm stopped the task at its "
                                       "deadline"),
    "CANCELLED": ("error", "Cancelled", "the task was cancelled in Slurm"),
    "NODE_FAIL": ("error", "NodeFail", "the task's node failed or was set "
                                       "DOWN"),
    "BOOT_FAIL": ("error", "NodeFail", "the task's node failed to boot"),
    "PREEMPTED": ("error", "Preempted", "the task was preempted"),
    "OUT_OF_MEMORY": ("oom", "OutOfMemory", "Slurm killed the task: out of "
                                            "memory (--mem)"),
    "FAILED": ("error", "NoResult", "the task failed"),
    "COMPLETED": ("error", "NoResult", "the task ended"),
}
# How long a task's result file may take to show up here after the task
# ended (attribute caching of a shared filesystem).
RESULT_GRACE_S = 10
# Options a suite's [slurm] table or a --slurm-config file may set.
CONFIG_KEYS = {"partition", "account", "qos", "constraint", "exclusive",
               "time_limit", "array_throttle", "mem", "gpu_freq", "sbatch"}
POLL_S = 2.0
# After Ctrl-C and scancel: how long to wait for the tasks to end, so that
# their cells are recorded as cancelled.
CANCEL_WAIT_S = 60
SLURM_DIR = "slurm"


class Options(NamedTuple):
    partition: Optional[str] = None
    account: Optional[str] = None
    qos: Optional[str] = None
    constraint: Optional[str] = None
    exclusive: bool = False
    # Slurm's --time for each task; None: the job's timeout plus margins.
    time_limit: Optional[str] = None
    array_throttle: Optional[int] = None
    mem: Optional[str] = None
    # Slurm's --gpu-freq: the clock policy where containers cannot set
    # clocks. Recorded in each result beside what telemetry saw.
    gpu_freq: Optional[str] = None
    # Further sbatch arguments, passed as they are.
    sbatch: tuple = ()


def options(flags, suite=None, config_path=None):
    """Options from a --slurm-config file, then a suite's [slurm] table,
    then flags (None: not given); each checked with a one-line error."""
    merged = {}
    if config_path:
        merged.update(_table(_read_config(config_path), config_path))
    if suite and suite.get("slurm"):
        merged.update(_table(suite["slurm"], f"suite {suite['name']}"))
    merged.update({k: v for k, v in flags.items()
                   if v is not None and v is not False})
    if "array_throttle" in merged:
        merged["array_throttle"] = parse.count(
            merged["array_throttle"], "--array-throttle")
    if merged.get("time_limit") is not None and not re.fullmatch(
            r"[0-9:-]+", str(merged["time_limit"])):
        raise UserError(f"--time-limit: Slurm's --time format (minutes, "
                        f"MM:SS, HH:MM:SS or D-HH), got "
                        f"{merged['time_limit']!r}")
    merged["sbatch"] = tuple(merged.get("sbatch") or ())
    return Options(**{k: (str(v) if isinstance(v, (int, float))
                          and not isinstance(v, bool)
                          and k != "array_throttle" else v)
                      for k, v in merged.items()})


def _read_config(path):
    try:
        return tomllib.loads(Path(path).read_text())
    except OSError as exc:
        raise UserError(f"--slurm-config {path}: {exc.strerror or exc}")
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise UserError(f"--slurm-config {path} is not valid TOML: {exc}")


def _table(data, where):
    if not isinstance(data, dict):
        raise UserError(f"{where}: [slurm] must be a table")
    unknown = set(data) - CONFIG_KEYS
    if unknown:
        raise UserError(f"{where}: unknown Slurm options "
                        f"{', '.join(sorted(unknown))}; valid: "
                        f"{', '.join(sorted(CONFIG_KEYS))}")
    if "sbatch" not in data:
        return dict(data)
    sbatch = data["sbatch"]
    if isinstance(sbatch, str):
        sbatch = shlex.split(sbatch)
    if not isinstance(sbatch, list) or not all(isinstance(a, str)
                                               for a in sbatch):
        raise UserError(f"{where}: `sbatch` must be a list of arguments or "
                        f"one string")
    return dict(data, sbatch=sbatch)


# --- talking to Slurm ----------------------------------------------------------

def _command(name):
    found = shutil.which(name)
    if found is None:
        raise UserError(f"{name} not found on PATH: the Slurm executor needs "
                        f"Slurm's client commands (sbatch, squeue, scontrol, "
                        f"scancel); nothing was submitted")
    return found


def _run(argv, timeout=60):
    try:
        return subprocess.run(argv, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True,
                              timeout=timeout, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        raise UserError(f"{Path(argv[0]).name} did not answer within "
                        f"{timeout} s; is slurmctld up?")


def _last_line(text):
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


def states(array_ids):
    """{(array job id, task index): TaskState} for the tasks Slurm still
    knows: sacct where accounting is on, else `scontrol show job`. An
    array sacct does not know yet (slurmctld hands new jobs to slurmdbd a
    moment after sbatch returns) is asked of scontrol, so that a task just
    submitted is never taken for one gone; so is a task sacct says has
    ended, in case slurmctld is still completing it."""
    if not array_ids:
        return {}
    found = _sacct(array_ids)
    if found is None:
        found = {}
    known = {array_id for array_id, _ in found}
    ended = {array_id for (array_id, _), task in found.items()
             if task.state not in ACTIVE}
    for array_id in array_ids:
        if array_id not in known:
            found.update(_scontrol(array_id))
        elif array_id in ended and shutil.which("scontrol"):
            # sacct records a task's end as soon as slurmctld signals it;
            # slurmctld keeps it COMPLETING until its processes are gone
            # (the harness writing what it measured, within KillWait).
            # Until then the task is not over.
            for key, task in _scontrol(array_id).items():
                if key in found and task.state in ACTIVE:
                    found[key] = task
    return found


def _sacct(array_ids):
    sacct = shutil.which("sacct")
    if sacct is None:
        return None
    proc = _run([sacct, "-n", "-P", "-X", "-j", ",".join(array_ids), "-o",
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
    proc = _run([_command("scontrol"), "show", "job", "-o", array_id])
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
    argv = [_command("sinfo"), "-h", "-o", "%c|%G"]
    if partition:
        argv += ["-p", partition]
    proc = _run(argv)
    if proc.returncode != 0 or not proc.stdout.strip():
        where = f"partition {partition!r}" if partition else \
            "the default partition"
        said = _last_line(proc.stderr) if proc.stderr.strip() else "no nodes"
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
                 and e["status"] not in runfolder.DONE_STATUSES]
    if record.get("executor") != "slurm" or not open_jobs:
        return None
    try:
        known = states(sorted({e["slurm"]["array_job_id"]
                               for e in open_jobs}))
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
        _run([_command("scancel")] + sorted(array_ids))


# --- the executor --------------------------------------------------------------

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


class SlurmExecutor:
    name = "slurm"
    batch = True

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

    def check(self, jobs=()):
        """Fail before a run folder exists when Slurm cannot be used or
        rejects what the jobs would ask for (`sbatch --test-only`: a
        partition, account, QOS or resources it refuses)."""
        for name in ("sbatch", "scontrol", "scancel"):
            _command(name)
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
        for array in arrays([j for j in jobs if not j.skip_reason]):
            argv = [_command("sbatch"), "--test-only"] + [
                a for a in self.sbatch_args(
                    array, None, max(j.timeout_s for j in array.jobs))
                if a != "--parsable"] + ["--wrap", "true"]
            proc = _run(argv)
            if proc.returncode != 0:
                raise UserError(f"Slurm rejects the job: "
                                f"{_last_line(proc.stderr or proc.stdout)}; "
                                f"nothing was submitted")

    def sbatch_args(self, array, run_dir, timeout_s):
        o = self.options
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
        args.append(f"--time={o.time_limit or _minutes(timeout_s + executor_mod.GRACE_S + 600)}")
        args += list(array.resources)
        args += list(o.sbatch)
        return args

    def _script(self, run_dir, submission, array=None):
        args = f"{shlex.quote(str(run_dir))} {shlex.quote(str(submission))}"
        head = (f"#!/bin/sh\n# dlrepro: one job of {submission.name} per "
                f"array task\ncd {shlex.quote(str(ROOT))}\n")
        if array is None or not multinode(array):
            return (head + f"exec {shlex.quote(sys.executable)} -m "
                    f"dlrepro.run.slurmenv {args}\n")
        # One step, one task per node (dlrepro.run.slurmenv); a node
        # whose part fails ends the step on every node. The job's outcome
        # is node 0's result (which folds in the other nodes'), so the
        # script itself ends 0 and Slurm's state does not overrule it.
        nodes = array.jobs[0].nodes
        return (head + f"srun --kill-on-bad-exit=1 --nodes={nodes} "
                f"--ntasks={nodes} --ntasks-per-node=1 "
                f"{shlex.quote(sys.executable)} -m dlrepro.run.slurmenv "
                f"{args}\necho \"dlrepro: srun ended with status $?\"\n"
                f"exit 0\n")

    def submit(self, jobs, runtime_name, run_dir, record):
        """Queue the jobs as arrays; every array is checked with
        --test-only first, so a rejection queues nothing. Returns
        {job id: slurm block for run.json}."""
        sbatch = _command("sbatch")
        folder = Path(run_dir) / SLURM_DIR
        folder.mkdir(exist_ok=True)
        slurm = record.setdefault("slurm", {"arrays": []})
        slurm["options"] = self.options._asdict()
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
                "runtime_options": self.runtime_options,
                "gpu_freq": self.options.gpu_freq,
                "jobs": [_job_document(j) for j in array.jobs]})
            script = folder / f"submit-{n}.sh"
            script.write_text(self._script(run_dir, submission, array))
            throttle = (f"%{self.options.array_throttle}"
                        if self.options.array_throttle else "")
            argv = [sbatch, f"--array=0-{len(array.jobs) - 1}{throttle}"] + \
                self.sbatch_args(array, run_dir,
                                 max(j.timeout_s for j in array.jobs)) + \
                [str(script)]
            planned.append((array, argv))
        blocks = {}
        for array, argv in planned:
            proc = _run(argv)
            if proc.returncode != 0:
                raise UserError(f"sbatch failed: "
                                f"{_last_line(proc.stderr or proc.stdout)}")
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

    def execute(self, jobs, runtime, run_dir, record, events, done,
                local_results, prepare_files):
        """Submit the jobs that need running (adopting tasks still in
        Slurm from an earlier submission), then wait for them unless told
        not to. `local_results(job)` ends a job without Slurm (unsupported
        here, its setup failed) and returns its result, or None;
        `prepare_files(job)` writes a job's spec file before it is
        submitted. Returns the run's status."""
        self.check()
        by_id = {e["id"]: e for e in record["jobs"]}
        total = len(jobs)
        finished = 0
        live = {(e["slurm"]["array_job_id"], e["slurm"]["array_task_id"])
                for e in record["jobs"] if e.get("slurm")}
        known = states(sorted({a for a, _ in live}))
        to_submit, waiting = [], []
        for job in jobs:
            entry = by_id[job.id]
            if job.id in done:
                finished += 1
                events.finish(finished, total, job, entry)
                continue
            result = local_results(job)
            if result is not None:
                entry.update(status=result["status"], finished_at=utc_now(),
                             message=(result["error"] or {}).get("message"))
                entry.pop("slurm", None)
                finished += 1
                events.finish(finished, total, job, entry)
                continue
            block = entry.get("slurm")
            task = known.get((block["array_job_id"], block["array_task_id"])) \
                if block else None
            if task is not None and task.state in ACTIVE:
                waiting.append(job)  # still queued or running: adopt it
            else:
                to_submit.append(job)
        if to_submit:
            for job in to_submit:
                prepare_files(job)
            blocks = self.submit(to_submit, runtime.name, run_dir, record)
            for job in to_submit:
                entry = by_id[job.id]
                entry.update(runfolder.new_entry(job), slurm=blocks[job.id])
                waiting.append(job)
            ids = sorted({blocks[j.id]["array_job_id"] for j in to_submit})
            events.log(f"submitted {len(to_submit)} job(s) to Slurm as "
                       f"array job(s) {', '.join(ids)}")
        if waiting and len(waiting) > len(to_submit):
            events.log(f"{len(waiting) - len(to_submit)} job(s) still in "
                       f"Slurm from an earlier submission: waiting for them")
        runfolder.write_run(run_dir, record)
        if not waiting:
            return "complete"
        if not self.wait:
            return "submitted"
        self.pending = {j.id: j for j in waiting}
        try:
            self._wait(by_id, run_dir, record, events, finished, total)
        except KeyboardInterrupt:
            self._interrupted(by_id, run_dir, record)
            raise
        return "complete"

    def _wait(self, by_id, run_dir, record, events, finished, total,
              deadline=None):
        """Until every job in self.pending has ended (or the deadline, a
        time.monotonic() value, has passed)."""
        pending = self.pending
        seen_running, last_counts = set(), None
        while pending and (deadline is None or time.monotonic() < deadline):
            arrays_ = sorted({by_id[i]["slurm"]["array_job_id"]
                              for i in pending})
            try:
                known = states(arrays_)
            except UserError as exc:  # slurmctld busy or restarting
                events.log(f"slurm: {exc}; asking again")
                time.sleep(self.poll_s * 5)
                continue
            counts = {}
            changed = False
            for job_id, job in list(pending.items()):
                entry = by_id[job_id]
                block = entry["slurm"]
                task = known.get((block["array_job_id"],
                                  block["array_task_id"]))
                state = task.state if task else "GONE"
                label = state.lower()
                if state == "PENDING" and task.reason not in (
                        None, "None", "(null)"):
                    label += f" ({task.reason})"
                counts[label] = counts.get(label, 0) + 1
                if task is not None:
                    if (block["state"], block["node"]) != (task.state,
                                                           task.node):
                        changed = True
                    block.update(state=task.state, reason=task.reason,
                                 node=task.node or block["node"],
                                 source=task.source)
                if state == "RUNNING" and job_id not in seen_running:
                    seen_running.add(job_id)
                    entry["status"] = "running"
                    entry["started_at"] = entry["started_at"] or utc_now()
                    events.start(finished + 1, total, job)
                if state in ACTIVE:
                    continue
                result = finish(job, run_dir, task, block)
                entry.update(status=result["status"], finished_at=utc_now(),
                             message=(result["error"] or {}).get("message"),
                             wall_s=_wall(result))
                del pending[job_id]
                finished += 1
                changed = True
                events.finish(finished, total, job, entry)
            if changed:
                runfolder.write_run(run_dir, record)
            if counts != last_counts and pending:
                events.log("slurm: " + ", ".join(
                    f"{n} {s}" for s, n in sorted(counts.items())))
                last_counts = counts
            if pending:
                time.sleep(self.poll_s)

    def _interrupted(self, by_id, run_dir, record):
        """Ctrl-C while waiting: cancel the tasks only when the user says
        so, then record how they ended (Cancelled, keeping what they
        measured); either way run.json keeps their Slurm ids for
        --resume."""
        arrays_ = sorted({by_id[i]["slurm"]["array_job_id"]
                          for i in self.pending})
        self.left_running = arrays_
        if arrays_ and self.confirm is not None and self.confirm(
                f"cancel Slurm job(s) {', '.join(arrays_)} (scancel)?"):
            cancel(arrays_)
            record.setdefault("slurm", {}).setdefault("cancelled", []).append(
                {"arrays": arrays_, "at": utc_now()})
            self.left_running = []
            try:
                self._wait(by_id, run_dir, record, pipeline.Events(), 0,
                           len(self.pending),
                           deadline=time.monotonic() + CANCEL_WAIT_S)
            except KeyboardInterrupt:
                pass  # a second Ctrl-C: --resume will record them
        runfolder.write_run(run_dir, record)


def _wall(result):
    """Seconds the job took in its task, as the task measured them."""
    return (result.get("slurm") or {}).get("wall_s")


def finish(job, run_dir, task, block):
    """The final result of a job whose task has ended: the task's own
    result, unless Slurm ended the task before it was final; then the
    status and reason come from Slurm and whatever was measured stays."""
    path = Path(run_dir) / f"{job.id}.json"
    result, problem = runfolder.read_result(path)
    deadline = time.monotonic() + RESULT_GRACE_S
    while result is None and time.monotonic() < deadline:
        # A network filesystem may show the node's file a little late.
        time.sleep(1)
        result, problem = runfolder.read_result(path)
    state = task.state if task else None
    detail = [f"Slurm state {task.detail or state}" if task else
              "no longer known to Slurm"]
    if task and task.reason and task.reason not in ("None", "(null)"):
        detail.append(f"reason {task.reason}")
    if task and task.node:
        detail.append(f"node {task.node}")
    said = f"{', '.join(detail)}; task {block['job_id']}"
    if result is not None and result["status"] == "oom" and \
            state == "OUT_OF_MEMORY":
        # The task saw its harness OOM-killed; Slurm says why: the task
        # went over its memory (--mem, or the partition's default).
        result["error"]["message"] += f"; Slurm: the task went over its " \
                                      f"memory limit ({said})"
        result.setdefault("slurm", dict(block))
        resultfile.write_atomic(str(path), result)
        return result
    if result is not None and result["status"] in runfolder.DONE_STATUSES:
        return result
    if result is not None and state in (None, "COMPLETED"):
        return result  # the task ran to its end: its own error or timeout
    status, error_type, what = ENDINGS.get(
        state, ("error", "NoResult", "the task is gone from Slurm"))
    message = f"{what} ({said})"
    if result is None:
        if path.exists():
            kept = path.with_suffix(".invalid.json")
            path.replace(kept)
            message += f"; its result was invalid ({problem}), kept as " \
                       f"{kept.name}"
        elif state in ("FAILED", "COMPLETED") or task is None:
            message += f"; it said: {collect.last_words(Path(run_dir) / (job.id + '.log'))}"
        result = collect.synthesized(job, status, error_type, message)
    else:
        result["status"] = status
        result["error"] = {"type": error_type, "message": message}
    result.setdefault("slurm", dict(block))
    resultfile.write_atomic(str(path), result)
    return result
