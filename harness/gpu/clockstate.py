"""The GPU clock-state file: its format, where it goes, and undoing what it
records.

Settings outlive the process, so the harness writes the original clock state
of every GPU it changes to this file before the first set call, and records
each call (with the call that undoes it) before making it. The harness undoes
them when a cell ends; after a SIGKILL the host replays the file
(`invoke gpu-restore`, dlrepro/run/gpu_restore.py), through `undo_changes`
here, so that both make exactly the same calls.
"""
import os
import signal
import socket
import time

from .. import blocks
from ..errors import HarnessError
from .nvml import NvmlCallError

STATE_FORMAT = "dlrepro-gpu-clock-state"
STATE_VERSION = 1
# States a state file can be in. `pending`: changes may be under way;
# `changed`: changes applied; `restore-failed`: an undo call failed. These
# three mean the GPU may still be changed.
OUTSTANDING = ("pending", "changed", "restore-failed")

# The only calls a state file may ask a restore to make.
UNDO_CALLS = ("nvmlDeviceSetAutoBoostedClocksEnabled",
              "nvmlDeviceSetDefaultAutoBoostedClocksEnabled",
              "nvmlDeviceSetApplicationsClocks",
              "nvmlDeviceResetApplicationsClocks",
              "nvmlDeviceResetGpuLockedClocks")


def state_path(out_path, clock_state=None):
    """Where the state file goes: `clock_state` (from the spec) relative to
    the result file's folder, or next to the result file."""
    folder = os.path.dirname(os.path.abspath(out_path))
    if clock_state is None:
        stem = os.path.basename(out_path)
        if stem.endswith(".json"):
            stem = stem[:-len(".json")]
        return os.path.join(folder, stem + ".clock-state.json")
    if not isinstance(clock_state, str) or not clock_state or \
            os.path.isabs(clock_state) or \
            ".." in clock_state.replace("\\", "/").split("/"):
        raise HarnessError("spec clock_state must be a file name relative to "
                           "the result's folder, got {!r}".format(clock_state))
    return os.path.join(folder, clock_state)


def group_state_path(cell_state_path):
    """Where a group's worker keeps its clock state: beside the state file
    its first GPU cell would have had, `<first>.worker.clock-state.json`
    (the name of the worker's log, `<first>.worker.log`, with the same
    stem), so that the host finds it from either."""
    for suffix in (".clock-state.json", ".json"):
        if cell_state_path.endswith(suffix):
            return cell_state_path[:-len(suffix)] + ".worker.clock-state.json"
    return cell_state_path + ".worker.clock-state.json"


def new_state(policy_text, gpus, originals):
    """A `pending` state file for `gpus` ((index, handle, info) each) whose
    clock settings before any change are `originals`."""
    return {"format": STATE_FORMAT, "version": STATE_VERSION,
            "status": "pending", "policy": policy_text,
            "created_at": blocks.utc_now(), "created_unix": time.time(),
            "host": socket.gethostname(),
            "pid": os.getpid(), "restored_at": None, "restored_by": None,
            "gpus": [{"index": index, "uuid": info.get("uuid"),
                      "name": info.get("name"), "original": original,
                      "changes": []}
                     for (index, _handle, info), original
                     in zip(gpus, originals)]}


def _undo_one(nvml, change, handle):
    """Make one change's undo call; returns whether it failed."""
    if change.get("undo_call") not in UNDO_CALLS:
        change["restore_error"] = "REFUSED_CALL"
        return True
    if handle is None:
        change["restore_error"] = "GPU_NOT_FOUND"
        return True
    try:
        nvml.call(change["undo_call"], handle, *change.get("undo_args", []))
    except NvmlCallError as exc:
        change["restore_error"] = exc.name
        return True
    change["restored"] = True
    change["restore_error"] = None
    return False


def undo_changes(nvml, state, handle_for, by):
    """Undo the outstanding changes of a state file (dict, changed in place):
    newest first, only through UNDO_CALLS. `handle_for(uuid)` gives the NVML
    handle (None when the GPU is not there). Marks the state restored or
    restore-failed."""
    failed = False
    for entry in reversed(state.get("gpus", [])):
        handle = None
        for change in reversed(entry.get("changes", [])):
            if change.get("state") not in ("attempting", "applied") or \
                    change.get("restored"):
                continue
            if handle is None and change.get("undo_call") in UNDO_CALLS:
                handle = handle_for(entry.get("uuid"))
            failed = _undo_one(nvml, change, handle) or failed
    if state.get("status") != "unchanged" or failed:
        state["status"] = "restore-failed" if failed else "restored"
    state["restored_at"] = blocks.utc_now()
    state["restored_by"] = by
    return state


class signals_deferred(object):
    """SIGTERM/SIGINT during a restore are noted, not acted on: a restore cut
    short would leave the GPU changed. The main thread only (signal rule)."""

    SIGNALS = (signal.SIGTERM, signal.SIGINT)

    def __enter__(self):
        self.received = []
        self.previous = {}
        for signum in self.SIGNALS:
            try:
                self.previous[signum] = signal.signal(signum, self._note)
            except ValueError:  # not the main thread
                pass
        return self.received

    def _note(self, signum, frame):
        self.received.append(signum)

    def __exit__(self, *exc):
        for signum, handler in self.previous.items():
            signal.signal(signum, handler)
        return False
