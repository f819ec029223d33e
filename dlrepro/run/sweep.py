"""Run a plan: one harness process per cell, like pyperf's workers.

A crash, an out-of-memory kill or a hang in one cell cannot take down the
sweep: each cell runs in its own process (or container) under a timeout,
ends with a result file whatever happened, and run.json is rewritten
atomically after every cell, so a sweep killed at any point keeps every
finished cell and `--resume` continues where it stopped.
"""
import ctypes
import os
import signal
import subprocess
import time
from pathlib import Path

from harness import provenance, resultfile
from harness.cell import new_result

from dlrepro import matrix as matrix_mod
from dlrepro.run import gpu_restore
from dlrepro.run import runfolder as results
from dlrepro.errors import UserError

# Seconds the harness gets after SIGTERM to write its partial result.
GRACE_S = 30


class Events:
    """What a sweep reports as it goes; the default reports nothing."""

    def log(self, message):
        pass

    def start(self, index, total, item):
        pass

    def finish(self, index, total, item, entry):
        pass


def spec_for(item, runtime, m):
    """What the harness is told: the cell plus facts it cannot know itself."""
    cell = item.cell
    entry = matrix_mod.entry(m, cell["framework"], cell["profile"])
    return {
        "cell": cell,
        "container": runtime.describe(cell["framework"], cell["profile"]),
        # Relative to the result file, so it lands on the host side of a
        # container's mount: the GPU clock state to restore after a crash.
        "clock_state": f"{item.id}.clock-state.json",
        "stack": {key: entry[key] for key in
                  ("framework_version", "python", "cuda", "cudnn", "nccl",
                   "sass", "ptx", "min_driver")},
    }


def synthesized(cell, status, error_type, message, container=None):
    """A result for a cell whose harness never wrote one (never started, or
    died first). Host facts only; framework fields stay null."""
    result = new_result(cell, container)
    env = result["environment"]
    host = provenance.host_environment()
    for key in ("host", "os", "cpu_model", "harness_version", "harness_digest"):
        env[key] = host[key]
    env["python_version"] = None
    env["recorded_by"] = "host"
    result["status"] = status
    result["error"] = {"type": error_type, "message": message}
    result["finished_at"] = results.utc_now()
    return result


def _entry(item):
    return {"id": item.id, "cell": item.cell, "status": "pending",
            "file": f"{item.id}.json", "log": f"{item.id}.log",
            "started_at": None, "finished_at": None, "wall_s": None,
            "message": None}


def new_record(run_dir, command, suite, runtime_name, plan):
    return {
        "schema_version": results.RUN_SCHEMA_VERSION,
        "run_id": Path(run_dir).name,
        "command": command,
        "suite": {"name": suite["name"], "path": suite["path"],
                  "description": suite["description"]},
        "runtime": runtime_name,
        "host": results.host_info(),
        "started_at": results.utc_now(),
        "finished_at": None,
        "status": "running",
        "resumed_at": [],
        "cells": [_entry(item) for item in plan],
    }


def merge_plan(record, plan):
    """Add the plan's cells to a resumed record. Returns {id: entry} of the
    cells already done with the same definition (they are skipped)."""
    by_id = {e["id"]: e for e in record["cells"]}
    done = {}
    for item in plan:
        old = by_id.get(item.id)
        if old is None:
            record["cells"].append(_entry(item))
        elif old["cell"] == item.cell and old["status"] in results.DONE_STATUSES:
            done[item.id] = old
        else:
            old.update(_entry(item))
    return done


def _stop(proc, launch):
    """Ask the harness to stop (SIGTERM: it writes a partial result), then
    kill its whole process group if it does not."""
    try:
        if launch.stop is not None:
            launch.stop()
        else:
            os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(GRACE_S)
    except (subprocess.TimeoutExpired, ProcessLookupError):
        pass
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait()


_PR_SET_PDEATHSIG = 1


def _term_when_parent_dies():
    """In the child, before exec: SIGTERM if the sweep dies (even by SIGKILL),
    so an orphaned harness writes what it measured and stops instead of
    running on beside a resumed sweep."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


def _run_process(launch, log_path, timeout_s):
    """Run the harness; returns (exit status, whether it timed out)."""
    with open(log_path, "ab") as log:
        # Its own session: a Ctrl-C at the terminal reaches the sweep only,
        # which then stops the cell cleanly (and its process group).
        proc = subprocess.Popen(launch.argv, env=launch.env, cwd=launch.cwd,
                                stdout=log, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL,
                                start_new_session=True,
                                preexec_fn=_term_when_parent_dies)
        try:
            return proc.wait(timeout_s), False
        except subprocess.TimeoutExpired:
            _stop(proc, launch)
            return proc.returncode, True
        except BaseException:
            _stop(proc, launch)
            raise


def _last_line(path):
    try:
        lines = [l for l in Path(path).read_text(errors="replace").splitlines()
                 if l.strip()]
    except OSError:
        return "(no log)"
    return lines[-1].strip() if lines else "(empty log)"


def _collect(item, run_dir, rc, timed_out, timeout_s, launch, container):
    """The cell's final result, from the harness's file or synthesized."""
    path = Path(run_dir) / f"{item.id}.json"
    log = Path(run_dir) / f"{item.id}.log"
    result = None
    if path.exists():
        try:
            result = resultfile.load(str(path))
        except (OSError, ValueError) as exc:
            result = synthesized(item.cell, "error", "InvalidResult",
                                 f"unreadable result file: {exc}", container)
        else:
            errors = results.validation_errors(result)
            if errors:
                os.replace(path, path.with_suffix(".invalid.json"))
                result = synthesized(
                    item.cell, "error", "InvalidResult",
                    f"result failed schema validation ({errors[0]}); kept as "
                    f"{path.with_suffix('.invalid.json').name}", container)
    if timed_out:
        done = len(((result or {}).get("timing") or {}).get(
            "per_iteration_s") or [])
        message = (f"cell exceeded its {timeout_s} s timeout after {done} of "
                   f"{item.cell['iterations']} timed iterations")
        if result is None:
            result = synthesized(item.cell, "timeout", "Timeout", message,
                                 container)
        result["status"] = "timeout"
        result["error"] = {"type": "Timeout", "message": message}
    elif result is None:
        extra = launch.post_mortem() if launch.post_mortem else None
        if rc in (-signal.SIGKILL, 128 + signal.SIGKILL):
            result = synthesized(
                item.cell, "oom", "Killed",
                extra or "the harness was killed by SIGKILL, most likely by "
                "the kernel's out-of-memory killer", container)
        else:
            result = synthesized(
                item.cell, "error", "NoResult",
                f"the harness exited with status {rc} without a result"
                f"{'; ' + extra if extra else ''}; last log line: "
                f"{_last_line(log)}", container)
    resultfile.write_atomic(str(path), result)
    return result


def execute(plan, runtime, run_dir, record, m, events=None, done=None):
    """Run every cell of `plan` not in `done`; returns the final record."""
    events = events or Events()
    done = done or {}
    by_id = {e["id"]: e for e in record["cells"]}
    reasons, failures = _prepare(plan, runtime, events, done)
    total = len(plan)
    record["status"] = "running"
    results.write_run(run_dir, record)
    try:
        for index, item in enumerate(plan, 1):
            entry = by_id[item.id]
            if item.id in done:
                events.finish(index, total, item, entry)
                continue
            events.start(index, total, item)
            entry["started_at"] = results.utc_now()
            started = time.monotonic()
            target = (item.cell["framework"], item.cell["profile"])
            if item.skip_reason or reasons.get(target):
                result = synthesized(item.cell, "unsupported", "Unsupported",
                                     item.skip_reason or reasons[target])
                resultfile.write_atomic(str(Path(run_dir) / entry["file"]),
                                        result)
            elif target in failures:
                result = synthesized(item.cell, "error", "SetupFailed",
                                     failures[target])
                resultfile.write_atomic(str(Path(run_dir) / entry["file"]),
                                        result)
            else:
                result = _run_cell(item, runtime, run_dir, m)
            entry.update(status=result["status"],
                         finished_at=results.utc_now(),
                         wall_s=round(time.monotonic() - started, 3),
                         message=(result["error"] or {}).get("message"))
            results.write_run(run_dir, record)
            events.finish(index, total, item, entry)
    except KeyboardInterrupt:
        record["status"] = "interrupted"
        record["finished_at"] = results.utc_now()
        results.write_run(run_dir, record)
        raise
    record["status"] = "complete"
    record["finished_at"] = results.utc_now()
    results.write_run(run_dir, record)
    return record


def _prepare(plan, runtime, events, done):
    """Make each framework's environment or image ready, one at a time, so
    one that cannot be made fails its own cells only."""
    targets = sorted({(i.cell["framework"], i.cell["profile"]) for i in plan
                      if not i.skip_reason and i.id not in done})
    reasons, failures = {}, {}
    for target in targets:
        try:
            reasons.update(runtime.prepare([target], log=events.log))
        except UserError as exc:
            failures[target] = str(exc)
            events.log(f"{target[0]}/{target[1]}: {exc}")
    return reasons, failures


def _run_cell(item, runtime, run_dir, m):
    spec = spec_for(item, runtime, m)
    resultfile.write_atomic(str(Path(run_dir) / f"{item.id}.spec.json"), spec)
    result_path = Path(run_dir) / f"{item.id}.json"
    if result_path.exists():
        result_path.unlink()  # a retried cell must not read its old result
    launch = runtime.launch(item.cell, Path(run_dir), item.id)
    try:
        rc, timed_out = _run_process(launch, Path(run_dir) / f"{item.id}.log",
                                     item.timeout_s)
        result = _collect(item, run_dir, rc, timed_out, item.timeout_s, launch,
                          spec["container"])
        # A harness killed mid-cell cannot restore the GPU clocks it changed:
        # the host does, from the state file it left on this side.
        message = gpu_restore.after_cell(result_path, spec["clock_state"])
        if message:
            result["warnings"].append(message)
            resultfile.write_atomic(str(result_path), result)
        return result
    finally:
        if launch.cleanup:
            launch.cleanup()
