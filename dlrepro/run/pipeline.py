"""The one job pipeline behind `invoke bench` and `invoke converge`:
prepare what the jobs run in, skip what is done, run each job under its
timeout, collect its result, keep run.json true after every job.

A crash, an out-of-memory kill or a hang in one job cannot take the run
down: each job runs in its own process (or container), ends in a result
file whatever happened, and run.json is rewritten atomically after every
job. Resume trusts the result files on disk, so nothing already measured
is measured again even when run.json lags behind (a kill, a full disk).
"""
from pathlib import Path
from typing import NamedTuple, Optional

from harness.blocks import utc_now

from dlrepro import matrix as matrix_mod
from dlrepro.errors import UserError
from dlrepro.run import groups, runfolder, runrecord, store
from dlrepro.run.folderwatch import FolderGone, HeldFolder, Watch
from dlrepro.run.engines import ENGINES, Context, LocalEngine
from dlrepro.run.events import Events, Interrupted
from dlrepro.run.kinds import KINDS
from dlrepro.run.life import JobLife
from dlrepro.run.process import interrupts_held


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
    """Execute `run` with `runtime` through `executor` (an Engine, named
    by --executor; the local one by default); returns the run folder."""
    events = events or Events()
    matrix = matrix if matrix is not None else matrix_mod.load()
    engine = executor or LocalEngine()
    engine.check(run.jobs, groups.summary(run.jobs))
    runtime.check()
    runtime.ready([job for job in run.jobs if not job.skip_reason])
    if run.resume:
        runfolder.ensure_writable(run.out)
        run_dir = resumable(run.out, run.kind)
    else:  # create_run checks that `out` is writable
        run_dir = runfolder.create_run(run.out, run.name)
    published = False
    try:
        with runfolder.locked(run_dir) as held:
            record, done = _open_record(run, run_dir, runtime, events,
                                        engine)
            _publish(run, run_dir, record)
            published = True
            _execute_or_fail(run, runtime, engine, run_dir, record, matrix,
                             events, done, held)
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
    # Each job's own mode (its entry's, this session's jobs' from
    # Job.isolation), summed up.
    record["isolation"] = groups.summed_up(record)
    runrecord.write_run(run_dir, record)
    runfolder.point_latest(run.out, run_dir, run.kind)


def _execute_or_fail(run, runtime, engine, run_dir, record, matrix, events,
                     done, held):
    try:
        # The run folder (held by the descriptor `held`) moved or deleted
        # meanwhile stops the run as Ctrl-C does, in one line
        # (folderwatch, _gone).
        watch = Watch(HeldFolder(run_dir, held))
        _execute(run.jobs, runtime, engine, run_dir, record, matrix,
                 events, done, held)
    except OSError as exc:
        watch.stop()
        if watch.held.gone():  # a write met it gone before the watch did
            raise _gone(watch.held, record, engine)
        if exc.errno not in runfolder.WRITE_FAILURES:
            raise
        _close(run_dir, record, "failed")
        raise UserError(f"{runfolder.full_disk_message(exc, run.out)}; "
                        f"every finished result in {run_dir} is kept: "
                        f"make room, then rerun with --resume")
    except FolderGone:
        watch.stop()
        raise _gone(watch.held, record, engine)
    finally:
        watch.stop()


def _gone(folder, record, engine):
    """The UserError of a run whose folder (a HeldFolder) was moved or
    deleted: its jobs here stopped (a detached engine's left to it), its
    run.json, in the folder wherever it went, `interrupted`; nothing
    written by the old path, which another folder may hold now."""
    record["status"] = "interrupted"
    record["finished_at"] = utc_now()
    written = folder.write_run(record)
    became = (f"its jobs handed to {engine.name} were left as they are"
              if engine.detached else engine.stopped())
    return UserError(folder.message(became, written))


def resumable(out, kind):
    """The latest run of `kind` under `out`, or a UserError saying there is
    none to resume."""
    try:
        return store.resolve_run(out, "latest", kind)
    except UserError:
        raise UserError(f"no {KINDS[kind].label} run under {out} to resume; run without "
                        f"--resume")


def _open_record(run, run_dir, runtime, events, engine):
    if not run.resume:
        return runrecord.new_record(run_dir, run.kind, run.command,
                                    runtime.name, run.jobs, run.suite,
                                    engine.name, engine.detached), {}
    record = store.read_run(run_dir)
    if record["kind"] != run.kind:
        raise UserError(f"{run_dir} is a {record['kind']} run, not a "
                        f"{run.kind} run")
    if record["runtime"] != runtime.name:
        raise UserError(f"the latest run used runtime {record['runtime']}; "
                        f"resume it with --runtime {record['runtime']}")
    runfolder.refuse_folders_for_files(run_dir)
    before = ENGINES.get(record.get("executor") or "local", LocalEngine)
    if before.detached and before.name != engine.name:
        # Its jobs may still run there: only that engine knows to wait
        # for them instead of running them a second time.
        raise UserError(f"the latest run used --executor {before.name}; "
                        f"resume it with --executor {before.name}")
    if not before.detached:
        # Nobody else writes this folder now (it is locked, no job runs
        # yet): a temp file here is a write cut short by a kill. A
        # detached engine's jobs may still be writing theirs elsewhere.
        runfolder.remove_stale_temps(run_dir)
    done = merge(record, run.jobs, run_dir, events.log)
    record["resumed_at"].append(utc_now())
    record["executor"] = engine.name
    record["detached"] = engine.detached
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
            entry = runrecord.new_entry(job)
            record["jobs"].append(entry)
            by_id[job.id] = entry
        result = store.finished_on_disk(run_dir, entry, job.spec)
        if result is not None:
            entry.update(spec=job.spec, status=result["status"],
                         message=(result["error"] or {}).get("message"))
            done[job.id] = entry
        else:
            entry.update(runrecord.new_entry(job))
            line = runfolder.set_aside_if_foreign(run_dir, job.id, job.spec)
            if line:
                log(line)
    return done


def _close(run_dir, record, status):
    record["status"] = status
    record["finished_at"] = utc_now()
    try:
        runrecord.write_run(run_dir, record)
    except OSError:
        pass  # a full disk: resume reads the result files themselves


def _execute(jobs, runtime, engine, run_dir, record, matrix, events, done,
             held):
    """Prepare the jobs' runtimes, then let the engine run them; run.json
    ends with the engine's status ("submitted" leaves it open). `held`:
    the descriptor that holds the run folder (runfolder.locked), which the
    jobs' processes inherit."""
    jobs = groups.order(jobs)
    workers = groups.planned_workers(jobs)
    if workers:
        record["workers"] = workers
    else:  # a group run resumed under --isolation cell
        record.pop("workers", None)
    try:
        life = JobLife(runtime, run_dir, matrix, engine.processes,
                       cannot=_prepare(jobs, runtime, events, done),
                       run_id=record.get("run_id"), held=held)
        status = engine.execute(Context(
            jobs=jobs, run_dir=Path(run_dir), record=record, done=done,
            life=life, events=events, isolation=record["isolation"]))
    except KeyboardInterrupt:
        # A further Ctrl-C must not cut short the run's last word, nor
        # turn it into "nothing to keep".
        with interrupts_held(then_raise=False):
            _close(run_dir, record, "interrupted")
            kept = _kept(run_dir, record)
        raise Interrupted(run_dir, kept, engine.stopped())
    if status == "submitted":
        record["status"] = status
        runrecord.write_run(run_dir, record)
    else:
        _close(run_dir, record, status)


def _kept(run_dir, record):
    """How many jobs have a valid final result on disk: the one that ended
    just as the signal came is there while run.json still says running."""
    return sum(1 for entry in record["jobs"]
               if store.finished_on_disk(run_dir, entry, entry["spec"])
               is not None)


def _prepare(jobs, runtime, events, done):
    """Make each framework's environment or image ready, one at a time, so
    one that cannot be made fails its own jobs only. {target: (reason it
    is unsupported, setup failure)} of those that cannot run."""
    targets = sorted({j.placement.target for j in jobs
                      if not j.skip_reason and j.id not in done})
    cannot = {}
    for target in targets:
        try:
            reason = runtime.prepare([target], log=events.log).get(target)
        except UserError as exc:
            cannot[target] = (None, str(exc))
            events.log(f"{target[0]}/{target[1]}: {exc}")
            continue
        if reason:
            cannot[target] = (reason, None)
    return cannot

