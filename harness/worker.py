"""python -m harness worker: several throughput cells, one after another,
in one warm process (a group), so that the interpreter, the framework's
import and the device's start are paid once.

The host writes one command per line on standard input: the path of a
spec file exactly as `python -m harness run --spec` takes it, as a JSON
string (command_line: a path may hold a newline, or bytes the locale
cannot decode), named `<id>.spec.json`; the result goes beside it as
`<id>.json` (the names the host's pipeline gives them). A line that is not
a JSON string is answered `cell-invalid`, as a spec that cannot be read.
Each cell runs through harness.throughput.run_cell, as `run` runs it: its
own model, warm-up, timing and result file, written atomically the moment
the cell ends. The worker answers on standard output with one line per
event, a word and a JSON object:

    cell-start {"spec": PATH, "worker_pid": PID}   (its spec read and valid)
    cell-done {"result": PATH, "status": STATUS}   (its result written)
    cell-invalid {"spec": PATH, "message": TEXT}   (no result: as `run`'s exit 2)

Anything else the framework prints to standard output goes to standard
error (the log), so these lines are the only ones there. End of input ends
the worker (exit 0).

The first cell fixes the process-wide settings (PROCESS_FIELDS and the
spec's PROCESS_SPEC_KEYS); a later cell that differs ends as an `error`
result saying which, without running. SIGTERM or SIGINT during a cell end
that cell as `run` ends it (a result with the measured iterations) and then
the worker (143, 130); between cells they end the worker at once. Every
result carries an `isolation` block: where the cell stood in the group and
the memory the process still held when it began, after the worker gave
back what it could (the framework's caches, Python's garbage: harness.
collector; the C heap's free memory: harness.allocator).

A GPU group's clock policy is applied once, before the warm-up of its first
GPU cell, and restored when the worker ends, however it ends
(harness/gpu/clockgroup.py: the record on disk and what each cell's
`gpu_clocks` says).
"""
import json
import os
import signal
import sys
import traceback

from . import allocator, blocks, collector, frameworks, lifecycle, phases, \
    provenance, resultfile
from .errors import HarnessError, Terminated
from .gpu import clocks, nvml
from .gpu.clockgroup import GroupClocks
from .gpu.clockstate import signals_deferred
from .spec import PROCESS_FIELDS, PROCESS_SPEC_KEYS, validate_cell
from .throughput import run_cell
# command_line: the tests write a worker's commands as the host does.
from .workerlines import command_line, spec_paths  # noqa: F401

SPEC_SUFFIX = ".spec.json"
RESULT_SUFFIX = ".json"
MODE = "group"
EXIT_STATUS = {"Terminated": 143, "KeyboardInterrupt": 130}


def result_path(spec_path):
    """Where the result of the spec file `spec_path` goes: <id>.json beside
    <id>.spec.json."""
    if not spec_path.endswith(SPEC_SUFFIX):
        raise HarnessError("a worker's spec file is named <id>{} (its result "
                           "goes to <id>{}), got {}".format(
                               SPEC_SUFFIX, RESULT_SUFFIX, spec_path))
    return spec_path[:-len(SPEC_SUFFIX)] + RESULT_SUFFIX


def read_spec(spec_path):
    """The spec and its cell, validated as `run` validates them."""
    try:
        with open(spec_path) as handle:
            spec = json.load(handle)
    except (IOError, OSError) as exc:
        raise HarnessError("cannot read spec {}: {}".format(
            spec_path, exc.strerror))
    except ValueError as exc:
        raise HarnessError("spec {} is not valid JSON: {}".format(
            spec_path, exc))
    return spec, validate_cell(spec.get("cell") if isinstance(spec, dict)
                               else None)


def process_settings(spec, cell):
    """What must be equal for two cells to share a process."""
    settings = dict(("cell." + key, cell[key]) for key in PROCESS_FIELDS)
    settings.update((key, spec.get(key)) for key in PROCESS_SPEC_KEYS)
    return settings


def mismatch(fixed, settings):
    """None when `settings` are the worker's `fixed` ones, else why not."""
    differ = ["{} is {} here, {} in this worker".format(
        key, json.dumps(settings[key], sort_keys=True),
        json.dumps(fixed[key], sort_keys=True))
        for key in sorted(fixed) if fixed[key] != settings[key]]
    if not differ:
        return None
    return ("not run: this worker's process-wide settings were fixed by its "
            "first cell and this cell differs ({}); run it in its own "
            "process".format("; ".join(differ)))


def rss_bytes(proc="/proc"):
    """This process's resident memory (VmRSS), or None where /proc does not
    say."""
    try:
        with open(os.path.join(proc, "self", "status")) as handle:
            for line in handle:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except (IOError, OSError, ValueError, IndexError):
        pass
    return None


def _gpu_held(index, handle, session):
    used, _ = session.try_call("nvmlDeviceGetMemoryInfo", handle)
    processes, _ = session.try_call("nvmlDeviceGetComputeRunningProcesses",
                                    handle)
    # NVML lists host PIDs: inside a container this process's own PID
    # matches none, and only the device's total is known.
    mine = [getattr(p, "usedGpuMemory", None) for p in processes or []
            if getattr(p, "pid", None) == os.getpid()]
    return {"index": index,
            "process_bytes": mine[0] if mine else None,
            "device_used_bytes": getattr(used, "used", None)}


def gpu_held(module=None):
    """[{index, process_bytes, device_used_bytes}] for the GPUs this process
    sees, through NVML; None without NVML."""
    session, _ = nvml.Nvml.open(module)
    if session is None:
        return None
    try:
        indices, _ = nvml.visible_indices(session)
        held = []
        for index in indices:
            handle, error = session.try_call("nvmlDeviceGetHandleByIndex",
                                             index)
            if error is None:
                held.append(_gpu_held(index, handle, session))
        return held
    finally:
        session.close()


def release_framework(framework, device, collect):
    """The one place the worker asks a backend to give memory back between
    cells: its release_memory(device, collect) (the backend contract,
    harness.frameworks), which frees what the framework lets go, making
    the worker's one garbage collection (`collect`) where it needs it, and
    returns a memory report (the calls made, what the framework still
    holds, what it keeps regardless). Returns (that, a note where it
    failed)."""
    try:
        backend = frameworks.load(framework)
    except HarnessError:
        return None, None
    try:
        return backend.release_memory(device, collect), None
    except Exception as exc:
        traceback.print_exc()
        return None, "release_memory failed: {}".format(
            lifecycle.error_block(exc)["message"])


class Worker(object):
    """The group's state: the settings its first cell fixed and the cells
    it has run, in order."""

    def __init__(self, protocol, gpu_module=None):
        self.protocol = protocol
        self.gpu_module = gpu_module
        self.fixed = None
        self.cells_before = []
        # The group's clock policy: applied before its first GPU cell's
        # warm-up, restored by end_group whenever the worker ends.
        self.clocks = GroupClocks(gpu_module)

    def clocks_for(self, out, spec):
        """The group's clock record copied to this cell's state file for
        as long as the cell runs, where the host looks should the worker
        die during it (harness.gpu.clockgroup)."""
        try:
            path = clocks.state_path(out, spec.get("clock_state"))
        except HarnessError:
            return  # the cell itself ends on it, as in `run`
        log_warning(self.clocks.cell_begins(path))

    def end_group(self):
        """Restore what the group's clock policy changed. A signal during
        it waits (a restore cut short would leave the GPU changed); the
        worker ends anyway."""
        with signals_deferred():
            self.clocks.restore()

    def say(self, event, **fields):
        self.protocol.write("{} {}\n".format(event, json.dumps(
            fields, sort_keys=True)))
        self.protocol.flush()

    def isolation_block(self):
        """Where the next cell stands in the group; its memory_held is
        filled in by hold_less."""
        return {"mode": MODE,
                "position": len(self.cells_before) + 1,
                "worker_pid": os.getpid(),
                "cells_before": list(self.cells_before),
                "memory_held": {"rss_bytes": None, "gpus": None,
                                "framework": None, "note": None,
                                "heap_trimmed": None}}

    def hold_less(self, held):
        """Free what the process can before the next cell, then record in
        `held` (an isolation block's memory_held) what it still holds."""
        device = self.fixed["cell.device"]
        if self.cells_before:
            # The cells before froze what they held (harness.collector):
            # thawed, and collected once, where the backend makes the
            # collection or else after it released the framework's state.
            held["framework"], held["note"] = collector.between_cells(
                lambda collect: release_framework(
                    self.fixed["cell.framework"], device, collect))
            # What the cells before freed goes back to the kernel, so this
            # cell faults its memory in as a fresh process would.
            held["heap_trimmed"] = allocator.give_back()
        held["rss_bytes"] = rss_bytes()
        if device == "gpu":
            held["gpus"] = gpu_held(self.gpu_module)

    def run_one(self, spec_path):
        """Run the cell of `spec_path`; its exit status when the worker must
        end now (a signal), else None. A cell said to start ends in a
        result, whenever a signal comes."""
        try:
            out = result_path(spec_path)
            spec, cell = read_spec(spec_path)
        except HarnessError as exc:
            self.say("cell-invalid", spec=spec_path, message=str(exc))
            return None
        settings = process_settings(spec, cell)
        self.fixed = self.fixed or settings
        isolation = self.isolation_block()
        try:
            self.say("cell-start", spec=spec_path, worker_pid=os.getpid())
            self.clocks_for(out, spec)
            self.hold_less(isolation["memory_held"])
            refusal = mismatch(self.fixed, settings)
            if refusal:
                result, ending = write_unrun(spec, cell, out, isolation, {
                    "type": "GroupMismatch", "message": refusal}), None
            else:
                self.cells_before.append(
                    os.path.basename(out)[:-len(RESULT_SUFFIX)])
                result, ending = run_guarded(spec, cell, out, isolation,
                                             self.clocks)
        except (Terminated, KeyboardInterrupt) as exc:
            # Before the cell began: it ends here, unrun, and so does the
            # worker.
            error = lifecycle.error_block(exc)
            result, ending = write_unrun(spec, cell, out, isolation,
                                         error), error["type"]
        log_warning(self.clocks.cell_ends())
        self.say("cell-done", result=out, status=result["status"])
        return EXIT_STATUS.get(ending)


def log_warning(message):
    if message:
        sys.stderr.write("harness: WARNING: {}\n".format(message))
        sys.stderr.flush()


def _stat(path):
    try:
        found = os.stat(path)
    except OSError:
        return None
    return (found.st_ino, found.st_mtime)


def run_guarded(spec, cell, out, isolation, group_clocks=None):
    """run_cell, and a result however it ends: a signal or a failure outside
    the cell's own lifecycle (before it arms SIGTERM or after its write)
    still leaves the cell a result, unless the cell wrote its own. Returns
    (result, the name of the signal's exception that must end the worker,
    or None)."""
    before = _stat(out)
    try:
        result = run_cell(spec, out, isolation=isolation,
                          group_clocks=group_clocks)
    except (Exception, Terminated, KeyboardInterrupt) as exc:
        traceback.print_exc()
        sys.stderr.flush()
        error = lifecycle.error_block(exc)
        if _stat(out) != before:
            # The signal came after the cell's write: its result stands.
            result = resultfile.load(out)
        else:
            result = write_unrun(spec, cell, out, isolation, error)
        return result, error["type"] if error["type"] in EXIT_STATUS else None
    return result, (result.get("error") or {}).get("type")


def write_unrun(spec, cell, out, isolation, error):
    """An `error` result for a cell the worker ended without running it."""
    result = blocks.new_result(cell, spec.get("container"),
                              spec.get("run_id"))
    result["phases"] = phases.new_block(phases.THROUGHPUT)
    result["isolation"] = isolation
    result["environment"].update(provenance.host_environment())
    result["error"] = error
    result["finished_at"] = blocks.utc_now()
    phases.stamp(result, "result_written")
    resultfile.write_atomic(out, result)
    return result


def protocol_stream():
    """A private copy of standard output for the worker's lines; file
    descriptor 1 then points at standard error, so that whatever a
    framework prints goes to the log, not into the protocol."""
    sys.stdout.flush()
    private = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    return private


def serve(commands, protocol, gpu_module=None):
    """Run the cells named on `commands` (a text stream) until it ends;
    the worker's exit status."""
    return serve_cells(commands, Worker(protocol, gpu_module))


def serve_cells(commands, worker):
    """worker.run_one for each spec path named on `commands` until it ends
    or a cell asks the worker to end; its exit status. A worker or the
    fork server (harness.forkserver), which share this loop."""
    # Between cells a SIGTERM ends the worker at once; during a cell
    # harness.lifecycle takes it over, and it ends the cell first.
    previous = signal.signal(signal.SIGTERM, lifecycle.on_sigterm)
    try:
        for spec_path in spec_paths(commands, worker.say):
            status = worker.run_one(spec_path)
            if status is not None:
                return status
    except Terminated:
        return EXIT_STATUS["Terminated"]
    except KeyboardInterrupt:
        return EXIT_STATUS["KeyboardInterrupt"]
    finally:
        worker.end_group()
        signal.signal(signal.SIGTERM, previous)
    return 0
