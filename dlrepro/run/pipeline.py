"""The one job pipeline behind `invoke bench` and `invoke converge`:
prepare what the jobs run in, skip what is done, run each job under its
timeout, collect its result, keep run.json true after every job.

A crash, an out-of-memory kill or a hang in one job cannot take the run
down: each job runs in its own process (or container), ends in a result
file whatever happened, and run.json is rewritten atomically after every
job. Resume trusts the result files on disk, so nothing already measured
is measured again even when run.json lags behind (a kill, a full disk).
"""
import time
from pathlib import Path
from typing import NamedTuple, Optional

from harness import resultfile
from harness.blocks import utc_now

from dlrepro import matrix as matrix_mod
from dlrepro.errors import UserError
from dlrepro.run import collect, gpu_restore, runfolder
from dlrepro.run.executor import LocalExecutor
from dlrepro.run.kinds import KINDS

STACK_KEYS = ("framework_version", "python", "cuda", "cudnn", "nccl", "sass",
              "ptx", "min_driver")


class Interrupted(Exception):
    """Ctrl-C stopped the run: the running job was stopped, run.json says
    `interrupted`, every finished result is kept."""

    def __init__(self, run_dir, kept, stopped="the running job was stopped"):
        super().__init__(f"interrupted: kept {kept} finished job(s) in "
                         f"{run_dir}")
        self.run_dir = run_dir
        self.kept = kept
        # What became of the jobs in flight (a batch executor may leave
        # them queued).
        self.stopped = stopped


class Events:
    """What a run reports as it goes; the default reports nothing."""

    def log(self, message):
        pass

    def start(self, index, total, job):
        pass

    def finish(self, index, total, job, entry):
        pass


class Run(NamedTuple):
    """What to run and where its results go."""
    kind: str
    jobs: list
    out: Path
    name: str                     # run folder's middle part: suite or kind
    command: str
    resume: bool = False
    suite: Optional[dict] = None


def start(run, runtime, matrix=None, events=None, executor=None):
    """Execute `run` with `runtime`; returns the run folder."""
    events = events or Events()
    matrix = matrix if matrix is not None else matrix_mod.load()
    executor = executor or LocalExecutor()
    if hasattr(executor, "check"):
        executor.check(run.jobs)
    runtime.check()
    runtime.ready([job for job in run.jobs if not job.skip_reason])
    if run.resume:
        runfolder.ensure_writable(run.out)
        run_dir = resumable(run.out, run.kind)
    else:  # create_run checks that `out` is writable
        run_dir = runfolder.create_run(run.out, run.name)
    published = False
    try:
        with runfolder.locked(run_dir):
            record, done = _open_record(run, run_dir, runtime, events,
                                        executor.name)
            _publish(run, run_dir, record)
            published = True
            _execute_or_fail(run, runtime, executor, run_dir, record, matrix,
                             events, done)
    except OSError as exc:
        if published or exc.errno not in runfolder.WRITE_FAILURES:
            raise
        again = "rerun with --resume" if run.resume else "run again"
        raise UserError(f"{runfolder.full_disk_message(exc, run.out)}; "
                        f"nothing was run: make room, then {again}")
    finally:
        if not published and not run.resume:
            runfolder.discard_unpublished(run_dir)
    return run_dir


def _publish(run, run_dir, record):
    """run.json first, then `latest`: a kill between the two leaves
    `latest` on the previous run, never on a folder without run.json."""
    record["status"] = "running"
    runfolder.write_run(run_dir, record)
    runfolder.point_latest(run.out, run_dir, run.kind)


def _execute_or_fail(run, runtime, executor, run_dir, record, matrix, events,
                     done):
    try:
        _execute(run.jobs, runtime, executor, run_dir, record, matrix,
                 events, done)
    except OSError as exc:
        if exc.errno not in runfolder.WRITE_FAILURES:
            raise
        _close(run_dir, record, "failed")
        raise UserError(f"{runfolder.full_disk_message(exc, run.out)}; "
                        f"every finished result in {run_dir} is kept: "
                        f"make room, then rerun with --resume")


def resumable(out, kind):
    """The latest run of `kind` under `out`, or a UserError saying there is
    none to resume."""
    try:
        return runfolder.resolve_run(out, "latest", kind)
    except UserError:
        raise UserError(f"no {KINDS[kind].label} run under {out} to resume; run without "
                        f"--resume")


def _open_record(run, run_dir, runtime, events, executor="local"):
    if not run.resume:
        return runfolder.new_record(run_dir, run.kind, run.command,
                                    runtime.name, run.jobs, run.suite,
                                    executor), {}
    record = runfolder.read_run(run_dir)
    if record["kind"] != run.kind:
        raise UserError(f"{run_dir} is a {record['kind']} run, not a "
                        f"{run.kind} run")
    if record["runtime"] != runtime.name:
        raise UserError(f"the latest run used runtime {record['runtime']}; "
                        f"resume it with --runtime {record['runtime']}")
    if record.get("executor") == "slurm" and executor != "slurm":
        # Its tasks may still be in Slurm: only the Slurm executor knows
        # to wait for them instead of running their jobs a second time.
        raise UserError("the latest run used --executor slurm; resume it "
                        "with --executor slurm")
    if record.get("executor") != "slurm":
        # Nobody else writes this folder now (it is locked, no job runs
        # yet): a temp file here is a write cut short by a kill. A Slurm
        # run's tasks may still be writing theirs on their nodes.
        runfolder.remove_stale_temps(run_dir)
    done = merge(record, run.jobs, run_dir, events.log)
    record["resumed_at"].append(utc_now())
    record["executor"] = executor
    events.log(f"resuming {run_dir}: {len(done)} of {len(run.jobs)} jobs "
               f"already done")
    return record, done


def merge(record, jobs, run_dir, log=lambda line: None):
    """Add the jobs to a resumed record. Returns {id: entry} of those
    already done with the same spec: a valid final result on disk counts,
    whatever run.json says. Another cell's result in a job's file is set
    aside (and logged) before the job runs again."""
    by_id = {e["id"]: e for e in record["jobs"]}
    done = {}
    for job in jobs:
        entry = by_id.get(job.id)
        if entry is None:
            entry = runfolder.new_entry(job)
            record["jobs"].append(entry)
            by_id[job.id] = entry
        result = runfolder.finished_on_disk(run_dir, entry, job.spec)
        if result is not None:
            entry.update(spec=job.spec, status=result["status"],
                         message=(result["error"] or {}).get("message"))
            done[job.id] = entry
        else:
            entry.update(runfolder.new_entry(job))
            line = runfolder.set_aside_if_foreign(run_dir, job.id, job.spec)
            if line:
                log(line)
    return done


def _close(run_dir, record, status):
    record["status"] = status
    record["finished_at"] = utc_now()
    try:
        runfolder.write_run(run_dir, record)
    except OSError:
        pass  # a full disk: resume reads the result files themselves


def _execute(jobs, runtime, executor, run_dir, record, matrix, events, done):
    by_id = {e["id"]: e for e in record["jobs"]}
    total = len(jobs)
    if getattr(executor, "batch", False):
        return _execute_batch(jobs, runtime, executor, run_dir, record,
                              matrix, events, done)
    try:
        reasons, failures = _prepare(jobs, runtime, events, done)
        for index, job in enumerate(jobs, 1):
            entry = by_id[job.id]
            if job.id not in done:
                events.start(index, total, job)
                _run_one(job, entry, runtime, executor, run_dir, matrix,
                         reasons, failures)
                runfolder.write_run(run_dir, record)
            events.finish(index, total, job, entry)
    except KeyboardInterrupt:
        _close(run_dir, record, "interrupted")
        raise Interrupted(run_dir, _kept(run_dir, record))
    _close(run_dir, record, "complete")


def _kept(run_dir, record):
    """How many jobs have a valid final result on disk: the one that ended
    just as the signal came is there while run.json still says running."""
    return sum(1 for entry in record["jobs"]
               if runfolder.finished_on_disk(run_dir, entry, entry["spec"])
               is not None)


def _execute_batch(jobs, runtime, executor, run_dir, record, matrix, events,
                   done):
    """A batch executor (Slurm) runs the jobs elsewhere: here each job is
    prepared, ended at once when it cannot run, or given its spec file;
    the executor submits the rest and waits for them (or not)."""
    try:
        reasons, failures = _prepare(jobs, runtime, events, done)

        def local_result(job):
            target = job.placement.target
            if job.skip_reason or reasons.get(target):
                return _write(run_dir, job, collect.synthesized(
                    job, "unsupported", "Unsupported",
                    job.skip_reason or reasons[target]))
            if target in failures:
                return _write(run_dir, job, collect.synthesized(
                    job, "error", "SetupFailed", failures[target]))
            return None

        status = executor.execute(
            jobs, runtime, run_dir, record, events, done, local_result,
            lambda job: _prepare_files(job, runtime, run_dir, matrix))
    except KeyboardInterrupt:
        _close(run_dir, record, "interrupted")
        left = getattr(executor, "left_running", None)
        raise Interrupted(run_dir, _kept(run_dir, record), (
            f"Slurm job(s) {', '.join(left)} left queued or running"
            if left else "its queued and running Slurm tasks were cancelled"))
    if status == "submitted":
        record["status"] = "submitted"
        runfolder.write_run(run_dir, record)
    else:
        _close(run_dir, record, status)


def _prepare(jobs, runtime, events, done):
    """Make each framework's environment or image ready, one at a time, so
    one that cannot be made fails its own jobs only."""
    targets = sorted({j.placement.target for j in jobs
                      if not j.skip_reason and j.id not in done})
    reasons, failures = {}, {}
    for target in targets:
        try:
            reasons.update(runtime.prepare([target], log=events.log))
        except UserError as exc:
            failures[target] = str(exc)
            events.log(f"{target[0]}/{target[1]}: {exc}")
    return reasons, failures


def _run_one(job, entry, runtime, executor, run_dir, matrix, reasons,
             failures):
    entry["started_at"] = utc_now()
    started = time.monotonic()
    target = job.placement.target
    if job.skip_reason or reasons.get(target):
        result = _write(run_dir, job, collect.synthesized(
            job, "unsupported", "Unsupported",
            job.skip_reason or reasons[target]))
    elif target in failures:
        result = _write(run_dir, job, collect.synthesized(
            job, "error", "SetupFailed", failures[target]))
    else:
        result = launch_job(job, runtime, executor, run_dir, matrix)
    entry.update(status=result["status"], finished_at=utc_now(),
                 wall_s=round(time.monotonic() - started, 3),
                 message=(result["error"] or {}).get("message"))


def _write(run_dir, job, result):
    resultfile.write_atomic(str(Path(run_dir) / f"{job.id}.json"), result)
    return result


def spec_file(job, container, matrix):
    """What the harness is told: the job's spec plus facts it cannot know
    itself."""
    entry = matrix_mod.entry(matrix, *job.placement.target)
    extra = {"profile_choice": job.profile_choice} if job.profile_choice \
        else {}
    return {
        **extra,
        job.spec_key: job.spec,
        "container": container,
        # Relative to the result file, so it lands on the host side of a
        # container's mount: the GPU clock state to restore after a crash.
        "clock_state": f"{job.id}.clock-state.json",
        "stack": {key: entry[key] for key in STACK_KEYS},
    }


def _prepare_files(job, runtime, run_dir, matrix, extra=None):
    """Before a job starts: its old result gone (a retried job must never
    be judged by it), its spec file written (with `extra`'s keys: a
    multi-node job's "cluster"). (container, spec)."""
    run_dir = Path(run_dir)
    result_path = run_dir / f"{job.id}.json"
    if result_path.exists():
        result_path.unlink()
    container = runtime.describe(job.placement.target)
    spec = dict(spec_file(job, container, matrix), **(extra or {}))
    resultfile.write_atomic(str(run_dir / f"{job.id}.spec.json"), spec)
    return container, spec


def launch_job(job, runtime, executor, run_dir, matrix, extra=None):
    """Run one job to its final result: here, or in a Slurm task (or one
    node's part of it: `extra` adds its "cluster" to the spec file)."""
    run_dir = Path(run_dir)
    result_path = run_dir / f"{job.id}.json"
    container, spec = _prepare_files(job, runtime, run_dir, matrix, extra)
    launch = runtime.launch(job, run_dir)
    try:
        exit = executor.run(launch, run_dir / f"{job.id}.log", job.timeout_s)
        result = collect.collect(job, run_dir, exit, launch, container)
    finally:
        runtime.cleanup(job, run_dir)
    # A harness killed mid-job cannot restore the GPU clocks it changed:
    # the host does, from the state file it left on this side.
    message = gpu_restore.after_cell(result_path, spec["clock_state"])
    if message:
        result["warnings"].append(message)
        _write(run_dir, job, result)
    return result
