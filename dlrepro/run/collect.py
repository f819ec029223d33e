"""A job's final result: the harness's own file when it wrote a valid
one, else one synthesized from what the host knows (exit status, the
runtime's post-mortem, the log), so that every job ends in exactly one
schema-valid result file. Validated here once; the caller writes it (at
most once, with whatever it adds) through dlrepro.run.writer."""
import signal
from pathlib import Path

from dlrepro.run import store
from dlrepro.run.paths import JobPaths
from dlrepro.run.writer import set_aside, synthesized

HARNESS_ERROR = "harness: error:"
KILLED = (-signal.SIGKILL, 128 + signal.SIGKILL)
# The errors of a result whose measurement a stop cut short (the harness's
# SIGTERM and SIGINT handlers).
CUT_SHORT = ("Terminated", "KeyboardInterrupt")


def ended_by_itself(result):
    """Whether `result` (read back, valid) is one the harness ended on its
    own, not one a stop cut short: a timeout never rewrites it, whatever
    the wall clock says (a host paused past the deadline, a process that
    hangs in its teardown after its result was written)."""
    return result is not None and \
        (result.get("error") or {}).get("type") not in CUT_SHORT


def ended_on_disk(path):
    """Whether the result file at `path` holds a result its harness ended
    on its own (ended_by_itself)."""
    result, _ = store.read_result(path)
    return ended_by_itself(result)


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


def collect(job, run_dir, exit, launch, container, run_id=None):
    """(the job's final result, whether it differs from run_dir/<id>.json:
    the caller must write it). `run_id`: the run's, which a result the
    host writes carries (None: it names no run; a node's side folder
    holds no run.json to ask)."""
    path = JobPaths(run_dir, job.id).result
    log = JobPaths(run_dir, job.id).log
    result, rewrite = None, True
    if path.exists():
        result, problem = store.read_result(path)
        if problem:
            kept = set_aside(path)
            result = synthesized(
                job, "error", "InvalidResult",
                f"{problem}; kept as {kept.name}; the harness said: "
                f"{last_words(log)}", container)
        else:
            rewrite = False
    if exit.timed_out and not ended_by_itself(result):
        rewrite = True
        result = _timed_out(job, result, container)
    elif result is None:
        result = _died(job, exit, launch, log, container)
    if rewrite and run_id and "run_id" not in result:
        # What the host writes belongs to this run as the harness's does.
        result["run_id"] = run_id
    return result, rewrite


def _timed_out(job, result, container):
    # Without a result the host cannot tell how many iterations were timed.
    done = None if result is None else len(
        (result.get("timing") or {}).get("per_iteration_s") or [])
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
