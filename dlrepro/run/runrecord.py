"""run.json, the one record of a run: its format and every earlier version
(read and upgraded in memory), a new record and its job entries, written
atomically. Every module that reads or writes run.json goes through this
one; dlrepro.run.paths names the files beside it, dlrepro.run.store reads
a whole run folder back, dlrepro.run.runfolder keeps the folder's life
(creation, lock, `latest`).

Format history:
  0  convergence runs before the shared pipeline: no schema_version,
     kind "convergence", `runs` with name/seconds/error.
  1  bench runs before the shared pipeline: `cells` with id/cell.
  2  one format for every kind: `kind` ("bench" or "converge"), `jobs`
     with id/spec/status/file/log/started_at/finished_at/wall_s/message;
     since issue 42 each job also has its `isolation` mode (absent: the
     run's `isolation` for its framework, dlrepro.run.groups.job_mode).
"""
import json
import os
import socket
from pathlib import Path

from harness import resultfile
from harness.blocks import utc_now

from dlrepro import git_revision
from dlrepro.errors import UserError
from dlrepro.run.kinds import KINDS
from dlrepro.run.paths import JobPaths, run_record

RUN_SCHEMA_VERSION = 2
ENTRY_FIELDS = ("id", "spec", "status", "file", "log", "started_at",
                "finished_at", "wall_s", "message")


def kind_of(record):
    """The kind of a run record that read_run accepted."""
    return KINDS[record["kind"]]


def read_run(run_dir):
    """run.json of any format version, upgraded to the current one;
    UserError naming the file when it is not a run record."""
    path = run_record(run_dir)
    try:
        record = json.loads(path.read_text(),
                            parse_constant=resultfile.not_json)
    except (OSError, ValueError) as exc:
        raise UserError(f"cannot read {path}: {exc}")
    except RecursionError:
        raise UserError(f"cannot read {path}: nested too deeply")
    if not isinstance(record, dict):
        raise UserError(f"{path} is not a run record (a JSON object)")
    version = record.get("schema_version")
    if version is None and record.get("kind") == "convergence":
        record = _upgrade_convergence(record)
    elif version == 1:
        record = _upgrade_bench(record)
    elif version != RUN_SCHEMA_VERSION:
        raise UserError(f"{path}: run.json version {version!r} is not "
                        f"supported (this version reads 0 to "
                        f"{RUN_SCHEMA_VERSION})")
    _check_shape(path, record)
    return record


def _check_shape(path, record):
    if record.get("kind") not in KINDS:
        raise UserError(f"{path}: kind {record.get('kind')!r} is not one of "
                        f"{', '.join(KINDS)}")
    jobs = record.get("jobs")
    if not isinstance(jobs, list) or not all(
            isinstance(e, dict) and set(ENTRY_FIELDS) <= set(e) for e in jobs):
        raise UserError(f"{path}: `jobs` must be a list of objects with "
                        f"{', '.join(ENTRY_FIELDS)}")
    for entry in jobs:
        for key in ("id", "status"):
            if not isinstance(entry[key], str):
                raise UserError(f"{path}: a job's `{key}` must be a string")
        _check_entry(path, entry)
    root = Path(path).parent.resolve()
    for entry in jobs:
        for key in ("file", "log"):
            name = entry[key]
            if not isinstance(name, str) or \
                    (root / name).resolve().parent != root:
                raise UserError(f"{path}: job {entry['id']!r} names {key} "
                                f"{name!r} outside its run folder")
    for key in ("run_id", "status", "resumed_at", "runtime"):
        if key not in record:
            raise UserError(f"{path}: missing `{key}`")
    if not isinstance(record["resumed_at"], list):
        raise UserError(f"{path}: `resumed_at` must be a list")
    for key in ("status", "run_id"):
        if not isinstance(record[key], str):
            raise UserError(f"{path}: `{key}` must be a string")
    if not isinstance(record.get("host") or {}, dict):
        raise UserError(f"{path}: `host` must be an object")
    _check_isolation(path, record.get("isolation"))


# What every job's spec, a cell's or a convergence run's, holds and the
# readers (report, export, compare) take as given.
SPEC_FIELDS = (("framework", str, "a string"), ("network", str, "a string"),
               ("device", str, "a string"),
               ("global_batch_size", int, "a whole number"),
               ("threads", (int, type(None)), "a whole number or null"))
_MISSING = object()


def _check_entry(path, entry):
    """What readers take a job's fields for: its spec an object, its
    stamps and message strings, its wall time a number of seconds."""
    where = f"{path}: job {entry['id']!r}"
    if not isinstance(entry["spec"], dict):
        raise UserError(f"{where}: `spec` must be an object")
    for key, kinds, what in SPEC_FIELDS:
        value = entry["spec"].get(key, _MISSING)
        if isinstance(value, bool) or not isinstance(value, kinds):
            raise UserError(f"{where}: its spec's `{key}` must be {what}")
    for key in ("started_at", "finished_at", "message"):
        if not isinstance(entry[key], (str, type(None))):
            raise UserError(f"{where}: `{key}` must be a string or null")
    wall = entry["wall_s"]
    if wall is not None and (isinstance(wall, bool) or not isinstance(
            wall, (int, float)) or wall < 0):
        raise UserError(f"{where}: `wall_s` must be seconds (a number, "
                        f"not below 0) or null")
    if not isinstance(entry.get("isolation", "cell"), str):
        raise UserError(f"{where}: `isolation` must be a string")


def _check_isolation(path, isolation):
    """run.json's `isolation`: absent, one mode, or {framework: mode}."""
    modes = isolation.values() if isinstance(isolation, dict) else \
        [isolation]
    if isolation is not None and not all(isinstance(m, str) for m in modes):
        raise UserError(f"{path}: `isolation` must be a mode (a string) or "
                        f"{{framework: mode}}")


def _upgrade_bench(record):
    record = dict(record, schema_version=RUN_SCHEMA_VERSION, kind="bench",
                  executor="local")
    cells = record.pop("cells", None)
    if isinstance(cells, list):
        record["jobs"] = [dict({k: v for k, v in e.items() if k != "cell"},
                               spec=e.get("cell")) if isinstance(e, dict)
                          else e for e in cells]
    return record


def _upgrade_convergence(record):
    runs = record.get("runs")
    jobs = None
    if isinstance(runs, list):
        jobs = [{"id": r.get("name"), "spec": r.get("spec"),
                 "status": r.get("status", "pending"), "file": r.get("file"),
                 "log": f"{r.get('name')}.log", "started_at": None,
                 "finished_at": None, "wall_s": r.get("seconds"),
                 "message": r.get("error")} if isinstance(r, dict) else r
                for r in runs]
    spec = (jobs[0].get("spec") if jobs and isinstance(jobs[0], dict)
            else None) or {}
    command = record.get("command")
    return {
        "schema_version": RUN_SCHEMA_VERSION, "kind": "converge",
        "run_id": record.get("run_id"),
        "command": (" ".join(map(str, command)) if isinstance(command, list)
                    else command),
        "suite": None, "runtime": spec.get("runtime", "native"),
        "executor": "local", "host": record.get("host"),
        "started_at": record.get("started_at"),
        "finished_at": record.get("finished_at"),
        "status": "complete" if record.get("finished_at") else "interrupted",
        "resumed_at": record.get("resumed_at", []), "jobs": jobs,
    }


def unheld_status(record):
    """What a run that says `running` while no process holds it is:
    `submitted` when its engine is detached (a batch queue's: its jobs
    run on in the queue after the process that waited for them was
    killed, and --resume waits for them again), else `interrupted`."""
    # As run.json says (the engines, which import this module, wrote it);
    # a run made before it said so reads as interrupted, as it did then.
    return "submitted" if record.get("detached") is True else "interrupted"


def host_info():
    return {"hostname": socket.gethostname(), "cpus": os.cpu_count()}


def new_entry(job):
    return {"id": job.id, "spec": job.spec, "status": "pending",
            "file": JobPaths.result_name(job.id),
            "log": JobPaths.log_name(job.id),
            "started_at": None, "finished_at": None, "wall_s": None,
            "message": None, "isolation": job.isolation}


def new_record(run_dir, kind, command, runtime, jobs, suite=None,
               executor="local", detached=False):
    return {
        "schema_version": RUN_SCHEMA_VERSION,
        "kind": kind,
        "run_id": Path(run_dir).name,
        "command": command,
        "suite": suite,
        "runtime": runtime,
        "executor": executor,
        # Its jobs run on without the process that waits for them (a batch
        # queue's): store.unheld_status reads it.
        "detached": detached,
        "host": host_info(),
        # The dlrepro that made the run ("" outside a git checkout).
        "dlrepro_commit": git_revision() or None,
        "started_at": utc_now(),
        "finished_at": None,
        "status": "running",
        "resumed_at": [],
        "jobs": [new_entry(job) for job in jobs],
    }


def write_run(run_dir, record):
    resultfile.write_atomic(str(run_record(run_dir)), record)


def end_entry(entry, result, finished_at=None, **more):
    """A run.json entry ended by its job's final result (`finished_at`:
    when it ended where it ran, if not now; `more`: the engine's own keys,
    e.g. wall_s)."""
    entry.update(status=result["status"], finished_at=finished_at or utc_now(),
                 message=(result["error"] or {}).get("message"), **more)
    return entry
