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

run.json itself, its format and its earlier versions, are
dlrepro.run.runrecord's.
"""
import fcntl
import json
import os
from functools import lru_cache
from pathlib import Path
from typing import NamedTuple, Optional

from harness import resultfile

from dlrepro.errors import UserError
from dlrepro.run.kinds import KINDS, kind_of_spec
from dlrepro.run.paths import JobPaths, run_record
from dlrepro.run.runrecord import kind_of, read_run, unheld_status

LATEST = {kind.name: kind.latest for kind in KINDS.values()}
# A job with one of these statuses is not run again by --resume; `error`
# and `timeout` may be transient, so they are retried.
DONE_STATUSES = ("ok", "oom", "unsupported", "diverged")
LOCK_NAME = ".lock"


class JobResult(NamedTuple):
    """One job of a run as read back (load_run): its run.json entry, with
    the status and message of its result where it has a valid one, and
    that result, or None. It unpacks as the (entry, result) pair that
    report, compare, export and history take."""
    entry: dict
    result: Optional[dict]


class Run(NamedTuple):
    """One run as read back: its real folder, run.json (upgraded) and its
    jobs, [JobResult] in job order (load_run)."""
    folder: Path
    record: dict
    jobs: list


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


def load_run(run_dir):
    """(record, [JobResult(entry, result or None)]) in job order. A job whose result
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
    jobs = []
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
        jobs.append(JobResult(entry, result))
    return record, jobs


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
