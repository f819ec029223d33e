"""A job's final result: the harness's own file when it wrote a valid
one, else one synthesized from what the host knows (exit status, the
runtime's post-mortem, the log), so that every job ends in exactly one
schema-valid result file, written once."""
import os
import signal
from pathlib import Path

from harness import provenance, resultfile
from harness.blocks import new_result, utc_now

from dlrepro.run import runfolder

HARNESS_ERROR = "harness: error:"
KILLED = (-signal.SIGKILL, 128 + signal.SIGKILL)


def synthesized(job, status, error_type, message, container=None):
    """A result for a job whose harness never wrote one (never started, or
    died first). Host facts only; framework fields stay null."""
    result = new_result(_cell_of(job), container)
    env = result["environment"]
    host = provenance.host_environment()
    for key in ("host", "os", "cpu_model", "harness_version", "harness_digest"):
        env[key] = host[key]
    env["python_version"] = None
    env["recorded_by"] = "host"
    result["status"] = status
    result["error"] = {"type": error_type, "message": message}
    result["finished_at"] = utc_now()
    return result


def _cell_of(job):
    """The result's `cell` block: the job's cell, or the one the harness
    derives from a convergence spec (no iterations ran: one, as the
    schema's minimum)."""
    return job.type.result_cell(job.spec)


def last_words(log_path):
    """The harness's own error line from the log, else its last line."""
    try:
        lines = [line.strip() for line in
                 Path(log_path).read_text(errors="replace").splitlines()
                 if line.strip()]
    except OSError:
        return "(no log)"
    for line in reversed(lines):
        if line.startswith(HARNESS_ERROR):
            return line[len(HARNESS_ERROR):].strip()
    return lines[-1] if lines else "(empty log)"


def collect(job, run_dir, exit, launch, container):
    """The job's final result, written to run_dir/<id>.json."""
    path = Path(run_dir) / f"{job.id}.json"
    log = Path(run_dir) / f"{job.id}.log"
    result, rewrite = None, True
    if path.exists():
        result, problem = runfolder.read_result(path)
        if problem:
            kept = path.with_suffix(".invalid.json")
            os.replace(path, kept)
            result = synthesized(
                job, "error", "InvalidResult",
                f"{problem}; kept as {kept.name}; the harness said: "
                f"{last_words(log)}", container)
        else:
            rewrite = False
    if exit.timed_out:
        rewrite = True
        result = _timed_out(job, result, container)
    elif result is None:
        result = _died(job, exit, launch, log, container)
    if rewrite:
        resultfile.write_atomic(str(path), result)
    return result


def _timed_out(job, result, container):
    done = len(((result or {}).get("timing") or {}).get(
        "per_iteration_s") or [])
    message = job.type.timeout_message(job.spec, job.timeout_s, done)
    if result is None:
        result = synthesized(job, "timeout", "Timeout", message, container)
    result["status"] = "timeout"
    result["error"] = {"type": "Timeout", "message": message}
    return result


def _died(job, exit, launch, log, container):
    if exit.start_error:
        return synthesized(job, "error", "StartFailed",
                           f"the harness could not be started: "
                           f"{exit.start_error}", container)
    death = launch.post_mortem(exit.pid) if launch.post_mortem else None
    detail = f"; {death.detail}" if death and death.detail else ""
    if exit.status in KILLED and death is not None and death.oom:
        return synthesized(job, "oom", "OutOfMemory",
                           f"the harness was killed by SIGKILL{detail}",
                           container)
    if exit.status in KILLED and death is not None and death.oom is None:
        # `oom` is never retried: only a kill known to be the OOM
        # killer's is one.
        return synthesized(job, "error", "Killed",
                           f"the harness was killed by SIGKILL, by the "
                           f"OOM killer or from outside{detail}; measured "
                           f"again on --resume", container)
    if exit.status in KILLED:
        return synthesized(job, "error", "Killed",
                           f"the harness was killed by SIGKILL from outside"
                           f"{detail}", container)
    if death is not None and death.oom:
        return synthesized(job, "oom", "OutOfMemory",
                           f"the harness exited with status {exit.status}"
                           f"{detail}", container)
    # "No OOM kill" says nothing about a process that exited by itself.
    detail = detail if death is not None and death.oom is None else ""
    return synthesized(job, "error", "NoResult",
                       f"the harness exited with status {exit.status} "
                       f"without a result{detail}; it said: "
                       f"{last_words(log)}", container)
