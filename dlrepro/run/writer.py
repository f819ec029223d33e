"""The one writer of results on the host: a result synthesized for a job
that never ran (or whose harness died first), an invalid result set aside,
a block added to a result (run.json and its entries are
dlrepro.run.runrecord's). Every result file the host writes goes through
`write_result`, atomically, so a kill mid-write loses nothing."""
import os
from pathlib import Path

from harness import provenance, resultfile
from harness.blocks import new_result, utc_now

from dlrepro.run.paths import JobPaths


def write_result(path, result):
    """Write a result file atomically; returns the result."""
    resultfile.write_atomic(str(path), result)
    return result


def synthesized(job, status, error_type, message, container=None,
                run_id=None):
    """A result for a job whose harness never wrote one (never started, or
    died first). Host facts only; framework fields stay null. `run_id`:
    the run's, which the result then names as a harness's does."""
    result = new_result(job.type.result_cell(job.spec), container)
    env = result["environment"]
    host = provenance.host_environment()
    for key in ("host", "os", "cpu_model", "harness_version",
                "harness_digest"):
        env[key] = host[key]
    env["python_version"] = None
    env["recorded_by"] = "host"
    result["status"] = status
    result["error"] = {"type": error_type, "message": message}
    result["finished_at"] = utc_now()
    if run_id:
        result["run_id"] = run_id
    return result


def write_synthesized(path, job, status, error_type, message,
                      container=None):
    """Synthesize a job's result and write it to `path`; returns it."""
    return write_result(path, synthesized(job, status, error_type, message,
                                          container))


def unrunnable(run_dir, job, reason=None, failure=None):
    """A job that cannot run here ends at once: `unsupported` (its own
    skip reason, or the runtime's `reason`) or `error` (its setup
    `failure`). Its result, written; None when it can run."""
    path = JobPaths(run_dir, job.id).result
    if job.skip_reason or reason:
        return write_synthesized(path, job, "unsupported", "Unsupported",
                                 job.skip_reason or reason)
    if failure:
        return write_synthesized(path, job, "error", "SetupFailed", failure)
    return None


def set_aside(path):
    """Move an invalid result file out of the way (`<id>.invalid.json`),
    kept for a person to look at; returns where it went."""
    path = Path(path)
    kept = JobPaths.invalid_of(path)
    os.replace(path, kept)
    return kept


def annotated(path, key, block, result):
    """Write `result` with `block` under `key`; returns it."""
    result[key] = block
    return write_result(path, result)
