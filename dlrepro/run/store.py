"""The one reader of run folders: it names runs (`--run` values, `latest`
pointers, every run under a results root), reads run.json of any format
version, and reads each job's result back, checked against the job. Report,
compare, export, the HTML page, the results database and resume read runs
only through it; dlrepro.run.runfolder writes them.

Layout of a run, whatever kind of job produced it:

    <out>/<run_id>/run.json              the command, host, every job's state
    <out>/<run_id>/<job_id>.json         one result per job (harness schema v1)
    <out>/<run_id>/<job_id>.log          the job's stdout and stderr
    <out>/<run_id>/<job_id>.spec.json    what the harness was asked to run
    <out>/<run_id>/.lock                 who runs it (the lock is on the
                                         folder itself, runfolder.locked)
    <out>/latest -> <run_id>             the newest bench run (moved once
                                         its run.json is on disk)
    <out>/latest-converge -> <run_id>    the newest convergence run

run.json format history (readers upgrade older records in memory):
  0  convergence runs before the shared pipeline: no schema_version,
     kind "convergence", `runs` with name/seconds/error.
  1  bench runs before the shared pipeline: `cells` with id/cell.
  2  one format for every kind: `kind` ("bench" or "converge"), `jobs`
     with id/spec/status/file/log/started_at/finished_at/wall_s/message;
     since issue 42 each job also has its `isolation` mode (absent: the
     run's `isolation` for its framework, dlrepro.run.groups.job_mode).
"""
import fcntl
import json
import os
from functools import lru_cache
from pathlib import Path
from typing import NamedTuple

from harness import resultfile

from dlrepro.errors import UserError
from dlrepro.run.kinds import KINDS, kind_of_spec
from dlrepro.run.paths import JobPaths, run_record

RUN_SCHEMA_VERSION = 2
LATEST = {kind.name: kind.latest for kind in KINDS.values()}
# A job with one of these statuses is not run again by --resume; `error`
# and `timeout` may be transient, so they are retried.
DONE_STATUSES = ("ok", "oom", "unsupported", "diverged")
ENTRY_FIELDS = ("id", "spec", "status", "file", "log", "started_at",
                "finished_at", "wall_s", "message")
LOCK_NAME = ".lock"


class Run(NamedTuple):
    """One run as read back: its real folder, run.json (upgraded) and
    [(entry, result or None)] in job order (load_run)."""
    folder: Path
    record: dict
    pairs: list


def kind_of(record):
    """The kind of a run record that read_run accepted."""
    return KINDS[record["kind"]]


def results_root(out):
    """`out` as a Path; an empty --out would silently mean the working
    directory, where run folders and `latest` links then get mixed up with
    whatever else is there."""
    if not str(out).strip():
        raise UserError("--out is empty: give a results folder (default: "
                        "results)")
    return Path(out)


def names_a_path(run):
    """Whether a --run value is a folder's path rather than a run's name:
    it has a path separator, or is `.` or `..`."""
    return os.sep in run or bool(os.altsep and os.altsep in run) or \
        run in (".", "..")


def resolve_run(out, run="latest", kind="bench"):
    """The real folder of run `run`. A path (names_a_path: `./ID`,
    `results/latest`, an absolute path) is taken as it is and must be a
    run folder; any other value (`latest`, `latest-converge`, a run id) is
    looked up under `out` only, whatever the working directory holds."""
    out = results_root(out)
    if names_a_path(run):
        if not run_record(run).exists():
            raise UserError(f"{run} is not a run folder (it has no run.json)")
        return Path(run).resolve()
    if run == "latest":
        run = LATEST[kind]
    path = out / run
    if not run_record(path).exists():
        if run in LATEST.values():
            raise UserError(f"no {kind} run under {out} yet; run `invoke "
                            f"{KINDS[kind].task}` first")
        hint = (f"; for the run folder {run} here, give --run ./{run}"
                if run_record(run).exists() else "")
        raise UserError(f"no run {run!r} under {out}{hint}")
    return path.resolve()


def run_folders(out, runs=("latest",), every=False):
    """The real run folders named by `runs` (ids, paths, `latest`), each
    once in the order first named however it was named, or with `every`
    all run folders under `out`, oldest first."""
    if every:
        out = results_root(out)
        found = sorted(p for p in out.iterdir()
                       if not p.is_symlink() and run_record(p).exists()) \
            if out.is_dir() else []
        if not found:
            raise UserError(f"no runs under {out}")
        return found
    return list(dict.fromkeys(resolve_run(out, run) for run in runs))


def held(run_dir):
    """Whether a live process holds the run folder's lock."""
    try:
        folder = os.open(run_dir, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return False
    try:
        fcntl.flock(folder, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(folder)
    return False


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


def _check_entry(path, entry):
    """What readers take a job's fields for: its spec an object, its
    stamps and message strings, its wall time a number of seconds."""
    where = f"{path}: job {entry['id']!r}"
    if not isinstance(entry["spec"], dict):
        raise UserError(f"{where}: `spec` must be an object")
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
        "command": " ".join(command) if isinstance(command, list) else command,
        "suite": None, "runtime": spec.get("runtime", "native"),
        "executor": "local", "host": record.get("host"),
        "started_at": record.get("started_at"),
        "finished_at": record.get("finished_at"),
        "status": "complete" if record.get("finished_at") else "interrupted",
        "resumed_at": record.get("resumed_at", []), "jobs": jobs,
    }


@lru_cache(maxsize=1)
def _validator():
    import jsonschema
    schema = json.loads(Path(resultfile.SCHEMA_PATH).read_text())
    return jsonschema.Draft7Validator(schema)


def validation_errors(result):
    """Schema violations of a result dict, as short strings ([] when valid)."""
    if not isinstance(result, dict):
        return ["(top): a result must be a JSON object"]
    errors = []
    for error in sorted(_validator().iter_errors(result), key=str):
        where = "/".join(str(p) for p in error.absolute_path) or "(top)"
        errors.append(f"{where}: {error.message}")
    if result.get("status") == "ok" and not errors:
        timing = result.get("timing") or {}
        expected = result["cell"]["iterations"]
        got = len(timing.get("per_iteration_s") or [])
        if got != expected:
            errors.append(f"timing/per_iteration_s: {got} values for "
                          f"{expected} iterations")
    return errors


def read_result(path):
    """(result, None) for a readable, schema-valid result file, else
    (None, why not): the one way results are read back."""
    path = Path(path)
    if not path.exists():
        return None, f"{path.name} is missing"
    try:
        result = resultfile.load(str(path))
    except (OSError, ValueError) as exc:
        return None, f"{path.name} is unreadable: {exc}"
    except RecursionError:
        return None, f"{path.name} is unreadable: nested too deeply"
    errors = validation_errors(result)
    if errors:
        return None, f"{path.name} does not match the result schema: " \
                     f"{errors[0]}"
    return result, None


def load_result(path):
    """A result from disk, validated; UserError naming the file when not."""
    result, problem = read_result(path)
    if problem:
        raise UserError(problem)
    return result


def asked_spec(run_dir, job_id):
    """What the harness was asked to run for `job_id`, from its spec file
    (None when there is none or it is unreadable)."""
    try:
        spec = json.loads(JobPaths(run_dir, job_id).spec.read_text())
        return spec.get("cell", spec.get("convergence"))
    except (OSError, ValueError, AttributeError, RecursionError):
        return None


def finished_on_disk(run_dir, entry, spec, kind=None):
    """The valid, final result of a job of `kind` (when not given, as
    `spec` looks) run with `spec` in this run, or None. Resume and report
    trust this over run.json, which a kill or a full disk may have left
    behind its result files."""
    kind = kind or kind_of_spec(spec)
    result, _ = read_result(Path(run_dir) / entry["file"])
    if result is None or result["status"] not in DONE_STATUSES:
        return None
    if not_its_own(entry, result, spec, kind, run_id_of(run_dir)):
        return None
    asked = asked_spec(run_dir, entry["id"])
    if asked is None and kind is KINDS["bench"]:
        # The spec file is gone; the result's own cell, just checked,
        # says what was measured.
        return result
    if _canonical(_with_defaults(asked, kind)) != \
            _canonical(_with_defaults(spec, kind)):
        return None
    return result


def not_its_own(entry, result, spec, kind=None, run_id=None):
    """Why `result`, read from the file run.json names for job `entry`, is
    not that job's own result, or None. A job's result is `<id>.json`, so
    a file belongs to one job only (--repeat's processes share a cell),
    its `cell` must be the job's, and its run (where it names one) the
    run `run_id`: a file copied from another cell or another run, or
    edited, is not reported, or kept by --resume, as this job. `kind`:
    the job's, when the caller knows it (else as `spec` looks)."""
    name = JobPaths.result_name(entry["id"])
    if entry["file"] != name:
        return f"run.json names {entry['file']} as its result, not {name}"
    if result is None:
        return None
    return foreign_cell(result, spec, name, kind) or \
        foreign_run(result, run_id, name)


def foreign_run(result, run_id, name):
    """How the result in file `name` says it is another run's than
    `run_id`, or None (also where it names no run: written before
    results named theirs, or by the host)."""
    theirs = result.get("run_id")
    if run_id is None or theirs is None or theirs == run_id:
        return None
    return f"{name} is the result of another run ({theirs})"


def run_id_of(run_dir):
    """The run_id run.json gives the run in `run_dir` (asked once per job:
    read without checking every entry again, as read_run does where it is
    not a string)."""
    try:
        run_id = json.loads((Path(run_dir) / "run.json").read_text()).get(
            "run_id")
    except (OSError, ValueError, AttributeError, RecursionError):
        run_id = None
    return run_id if isinstance(run_id, str) else read_run(run_dir)["run_id"]


def run_id_or_none(run_dir):
    """The run's id from run.json in `run_dir`; None where there is no
    readable run.json (a node's folder handed no run record): a result
    written there then names no run, as results before run ids did."""
    try:
        return run_id_of(run_dir)
    except UserError:
        return None


def foreign_cell(result, spec, name, kind=None):
    """How the result in file `name` differs from the cell of a job of
    `kind` run with `spec`, or None when it does not."""
    # A result's cell says no kind; its fields are a cell's either way.
    cell = _with_defaults(result["cell"])
    for key, expected in expected_cell(spec, kind).items():
        if _canonical(cell.get(key)) != _canonical(expected):
            return (f"{name} is the result of another cell ({key} "
                    f"{cell.get(key)}, not {expected})")
    return None


def expected_cell(spec, kind=None):
    """What a result's `cell` holds for a job of `spec`: a bench job's
    spec is its cell; a convergence job's cell is derived from its spec
    (harness.spec.convergence_cell) less what the data and the run's
    length decide (dataset label, iterations, warm-up). `kind` when the
    record says it, else as `spec` looks."""
    kind = kind or kind_of_spec(spec)
    return kind.expected_cell(spec) if kind and isinstance(spec, dict) \
        else {}


def _with_defaults(spec, kind=None):
    """`spec` as its kind (when not given, as it looks) fills in fields
    added since it was written."""
    kind = kind or kind_of_spec(spec)
    return kind.with_defaults(spec) if kind and isinstance(spec, dict) \
        else spec


def _canonical(value):
    return json.dumps(value, sort_keys=True)


def unheld_status(record):
    """What a run that says `running` while no process holds it is:
    `submitted` when its engine is detached (a batch queue's: its jobs
    run on in the queue after the process that waited for them was
    killed, and --resume waits for them again), else `interrupted`."""
    # As run.json says (the engines, which import this module, wrote it);
    # a run made before it said so reads as interrupted, as it did then.
    return "submitted" if record.get("detached") is True else "interrupted"


def load_run(run_dir):
    """(record, [(entry, result or None)]) in job order. A job whose result
    file is damaged, or is not its own (not_its_own), keeps result None and
    says why in its entry's message; the others are read as usual. An
    entry takes the status (and message) of its valid result on disk,
    whatever run.json says, and a run that says `running` while no
    process holds it is shown `interrupted` (`submitted` where its engine
    is detached: its jobs run on without the process that waited)."""
    record = read_run(run_dir)
    if record["status"] == "running" and not held(run_dir):
        # Its process died without closing it (a kill, a full disk).
        record["status"] = unheld_status(record)
    kind = kind_of(record)
    pairs = []
    for entry in record["jobs"]:
        result, problem = read_result(Path(run_dir) / entry["file"])
        mismatch = not_its_own(entry, result, entry["spec"], kind,
                               record["run_id"])
        if mismatch:
            result, problem = None, mismatch
        entry = dict(entry)
        if result is not None:
            # The file is what was measured; run.json may lag behind it
            # (a kill) or be edited. Resume trusts the file too.
            entry["status"] = result["status"]
            entry["message"] = (result["error"] or {}).get("message")
        elif problem and (entry["status"] != "pending" or mismatch):
            entry["status"] = "error"
            entry["message"] = problem
        pairs.append((entry, result))
    return record, pairs


def runs(out, names=("latest",), every=False):
    """Each run that `names` (ids, paths, `latest`) name, read once in the
    order first named, or with `every` all runs under `out`, oldest first:
    the one way report, export and the HTML page iterate runs. A run is
    known by its run_id, as the results database keys it: a copy of a
    run folder (`cp -a`) named beside it is the same run, read once (the
    first named), never pooled with itself."""
    found = {}
    for folder in run_folders(out, names, every):
        run = Run(folder, *load_run(folder))
        found.setdefault(run.record["run_id"], run)
    return list(found.values())
