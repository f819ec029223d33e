"""How a run ends: in a result file with a status, whatever happens once its
spec has been read. Throughput cells (harness.throughput) and convergence
runs (harness.converge) both go through `run`, so an out-of-memory device,
a stack that cannot run, a crash in the framework and a SIGTERM from the
host's timeout are told apart in the same way in both.
"""
import signal
import sys
import traceback

from . import blocks, phases, resultfile
from .errors import Terminated, Unsupported


def on_sigterm(signum, frame):
    # One SIGTERM is enough: a second (Slurm signals every process of a
    # task, then the task stops its harness too) must not interrupt the
    # writing of the partial result.
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    raise Terminated("terminated by signal {}".format(signum))


def error_block(exc):
    """{"type", "message"}: the exception's first line (the traceback goes
    to the log)."""
    message = str(exc).strip()
    return {"type": type(exc).__name__,
            "message": message.splitlines()[0] if message
            else type(exc).__name__}


def _device_ran_out(is_out_of_memory, exc):
    if not isinstance(exc, Exception):
        return False
    try:
        return bool(is_out_of_memory(exc))
    except Exception:
        # Deciding the status must never cost the result; the classifier's
        # own failure goes to the log after the run's traceback.
        traceback.print_exc()
        return False


def set_outcome(result, diverged_at, where=""):
    """A body's last step: status "diverged" (with the iteration, `where`
    saying how it is counted) when the loss became non-finite, else "ok"."""
    if diverged_at is not None:
        result["status"] = "diverged"
        result["error"] = {"type": "Diverged", "message":
                           "loss became NaN or infinite at iteration "
                           "{}{}".format(diverged_at, where)}
    else:
        result["status"] = "ok"


def run(result, out_path, body, is_out_of_memory, close, finish):
    """Call body() (which sets result["status"] to ok or diverged) with
    SIGTERM raising Terminated; on an exception set status and error:
    `unsupported` for Unsupported, `oom` where is_out_of_memory(exc) says
    the device ran out, else `error` (the traceback to stderr, the cell's
    log). Then, always: close(result) (release devices, restore clocks),
    the previous SIGTERM handler back, finish(result) (fill in what was
    measured), finished_at, and the result written to `out_path` (its
    phases, those reached so far, stamped with the write's start).
    Returns the result."""
    previous_handler = signal.signal(signal.SIGTERM, on_sigterm)
    try:
        body()
    except Unsupported as exc:
        result["status"] = "unsupported"
        result["error"] = {"type": "Unsupported", "message": str(exc)}
    except (Exception, Terminated, KeyboardInterrupt) as exc:
        traceback.print_exc()
        sys.stderr.flush()
        oom = _device_ran_out(is_out_of_memory, exc)
        result["status"] = "oom" if oom else "error"
        result["error"] = error_block(exc)
    finally:
        # What was measured is written whatever arrives now: a later SIGTERM
        # (Slurm signals every process of a task, and the task then stops
        # its harness too) must not end the process before the write. The
        # host escalates to SIGKILL after its grace if this hangs.
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        close(result)
        finish(result)
        result["finished_at"] = blocks.utc_now()
        phases.stamp(result, "result_written")
        resultfile.write_atomic(out_path, resultfile.json_safe(result))
        signal.signal(signal.SIGTERM, previous_handler)
    return result
