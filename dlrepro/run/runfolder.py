"""Run folders, run.json, the `latest` pointer, and reading results back.

Layout of one `invoke bench` run:

    results/<run_id>/run.json           the command, host, every cell's state
    results/<run_id>/<cell_id>.json     one result per cell (harness schema v1)
    results/<run_id>/<cell_id>.log      the cell's stdout and stderr
    results/<run_id>/<cell_id>.spec.json  what the harness was asked to run
    results/latest -> <run_id>          the newest run (a symlink)

run.json format history:
  1  first version.
"""
import datetime
import json
import os
import secrets
import socket
from functools import lru_cache
from pathlib import Path

from harness import resultfile

from dlrepro.errors import UserError

RUN_SCHEMA_VERSION = 1
LATEST = "latest"
# A cell with one of these statuses is not run again by --resume; `error`
# and `timeout` may be transient, so they are retried.
DONE_STATUSES = ("ok", "oom", "unsupported", "diverged", "skipped")


def utc_now():
    return datetime.datetime.now(datetime.timezone.utc).strftime(
        "%Y-%m-%dT%H:%M:%SZ")


def new_run_id(suite_name):
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime(
        "%Y%m%dT%H%M%SZ")
    return f"{stamp}-{suite_name}-{secrets.token_hex(2)}"


def ensure_writable(out):
    """Create the results root or fail with a one-line reason."""
    out = Path(out)
    try:
        out.mkdir(parents=True, exist_ok=True)
        probe = out / f".write-test-{os.getpid()}"
        probe.write_text("")
        probe.unlink()
    except OSError as exc:
        raise UserError(f"cannot write results to {out}: "
                        f"{exc.strerror or exc}")
    return out


def create_run(out, suite_name):
    out = ensure_writable(out)
    run_id = new_run_id(suite_name)
    run_dir = out / run_id
    run_dir.mkdir()
    return run_dir


def point_latest(out, run_dir, name=LATEST):
    """Make results/<name> (`latest`) name `run_dir`, atomically (rename
    over it)."""
    link = Path(out) / name
    tmp = Path(out) / f".{name}-{os.getpid()}"
    if tmp.is_symlink() or tmp.exists():
        tmp.unlink()
    tmp.symlink_to(run_dir.name)
    os.replace(tmp, link)


def resolve_run(out, run="latest"):
    """The folder of run `run` (an id, `latest`, or a path) under `out`."""
    candidate = Path(run)
    if candidate.is_dir() and (candidate / "run.json").exists():
        return candidate
    path = Path(out) / run
    if not (path / "run.json").exists():
        if run == LATEST:
            raise UserError(f"no runs under {out} yet; run `invoke bench` first")
        raise UserError(f"no run {run!r} under {out}")
    return path.resolve()


def write_run(run_dir, record):
    resultfile.write_atomic(str(Path(run_dir) / "run.json"), record)


def read_run(run_dir):
    path = Path(run_dir) / "run.json"
    try:
        record = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise UserError(f"cannot read {path}: {exc}")
    if record.get("schema_version") != RUN_SCHEMA_VERSION:
        raise UserError(f"{path}: run.json version "
                        f"{record.get('schema_version')!r} is not supported "
                        f"(this version reads {RUN_SCHEMA_VERSION})")
    return record


def host_info():
    return {"hostname": socket.gethostname(), "cpus": os.cpu_count()}


@lru_cache(maxsize=1)
def _validator():
    import jsonschema
    schema = json.loads(Path(resultfile.SCHEMA_PATH).read_text())
    return jsonschema.Draft7Validator(schema)


def validation_errors(result):
    """Schema violations of a result dict, as short strings ([] when valid)."""
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


def load_result(path):
    """A cell result from disk, validated; UserError when unreadable."""
    try:
        result = resultfile.load(str(path))
    except (OSError, ValueError) as exc:
        raise UserError(str(exc))
    errors = validation_errors(result)
    if errors:
        raise UserError(f"{path} does not match the result schema: {errors[0]}")
    return result


def load_run_results(run_dir):
    """[(cell entry from run.json, result dict or None)] in plan order."""
    record = read_run(run_dir)
    pairs = []
    for entry in record["cells"]:
        path = Path(run_dir) / entry["file"]
        pairs.append((entry, load_result(path) if path.exists() else None))
    return record, pairs
