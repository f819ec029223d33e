"""GPU clock policy: apply, verify, record and always restore.

Policies (`clock_policy` of a cell):
- `observe`: read the clocks, change nothing.
- `disable-boost`: the paper's setting, as each generation allows it (NVML
  has no single switch). Volta and newer: lock the graphics clock at base
  (nvmlDeviceSetGpuLockedClocks). Kepler/Maxwell Tesla: turn autoboost and
  its default off, then set the application clocks to base. Otherwise
  (Pascal, or a Volta+ whose driver refuses locked clocks): application
  clocks at base. Each method falls back to the next when NVML answers
  NOT_SUPPORTED or the driver lacks the function.
- `lock=<MHz>`: the same methods at the given graphics clock (the nearest
  supported application clock at or below it where locked clocks are not
  available).

"Base" is the default application clock (NVML_CLOCK_ID_APP_CLOCK_DEFAULT):
NVML has no base-clock query, and on boards with application clocks the
default is the clock the GPU holds without boost (K80: 562 MHz, the clock
the paper's K80 runs appear to have used). Where the default application
clock equals the maximum clock (Hopper boards: boost is the default), it says
nothing about base, so the datasheet base clock from harness/gpu/peaks.py is
used (snapped to a supported clock), and the policy is refused when that is
unknown too. Reading, planning and checking the calls:
harness/gpu/clockplan.py.

Settings outlive the process, so the GPU is never changed without a record:
the original state is written to a state file (on the host side of a
container's mount) before the first set call; every call is recorded as
`attempting`, with the call that undoes it, before it is made. Restore undoes
them in reverse order (in `finally`, on SIGTERM/SIGINT through the cell's
exception path, at exit) and marks the file `restored`; after a SIGKILL the
host replays the file (`invoke gpu-restore`, dlrepro/run/gpu_restore.py).
The file's format and its undo: harness/gpu/clockstate.py.

Every set call needs root, and in a container CAP_SYS_ADMIN plus
NVIDIA_DRIVER_CAPABILITIES containing `utility`. Without them NVML answers
NO_PERMISSION: the cell continues in observe mode and says so loudly.

NVML locked clocks cannot be read back (there is no getter): their check is
the SM clock that telemetry measures during the timed window.
"""
import atexit
import os
import sys
from collections import namedtuple

from .. import resultfile
from .clockplan import (base_clock, methods_for, not_at_defaults,
                        read_state, restore_record, verify)
from .clockstate import new_state, signals_deferred, undo_changes
from ..errors import HarnessError
from .nvml import NvmlCallError
# Re-exported: the host and the tests name them as harness.gpu.clocks.<name>.
from .clockplan import Step, plan
from .clockstate import (OUTSTANDING, STATE_FORMAT, STATE_VERSION,
                         UNDO_CALLS, group_state_path, state_path)

__all__ = ["OBSERVE", "DISABLE_BOOST", "LOCK", "Policy", "parse_policy",
           "needs_privileges", "container_requirements", "ClockSession",
           "Step", "plan", "read_state", "base_clock", "not_at_defaults",
           "OUTSTANDING", "STATE_FORMAT", "STATE_VERSION", "UNDO_CALLS",
           "state_path", "group_state_path", "undo_changes"]

OBSERVE = "observe"
DISABLE_BOOST = "disable-boost"
LOCK = "lock"

# NVML answers after which the next method may work.
FALL_THROUGH = ("NOT_SUPPORTED", "FUNCTION_NOT_FOUND")
NO_PERMISSION = "NO_PERMISSION"
PERMISSION_HINT = ("needs root, and in a container CAP_SYS_ADMIN and "
                   "NVIDIA_DRIVER_CAPABILITIES containing utility")

Policy = namedtuple("Policy", "name mhz text")


def parse_policy(text):
    """`observe`, `disable-boost` or `lock=<MHz>` -> Policy."""
    if text in (OBSERVE, DISABLE_BOOST):
        return Policy(text, None, text)
    if isinstance(text, str) and text.startswith(LOCK + "="):
        value = text[len(LOCK) + 1:]
        if value.isdigit() and int(value) > 0:
            return Policy(LOCK, int(value), text)
    raise HarnessError("clock_policy must be observe, disable-boost or "
                       "lock=<MHz> (e.g. lock=1410), got {!r}".format(text))


def needs_privileges(text):
    """Whether a policy changes clocks (so needs root/CAP_SYS_ADMIN)."""
    return parse_policy(text).name != OBSERVE


def container_requirements(text):
    """What a container needs for this policy to be able to set clocks: the
    docker runtime adds these only when the policy changes clocks."""
    if not needs_privileges(text):
        return {"cap_add": [], "env": {}}
    return {"cap_add": ["SYS_ADMIN"],
            "env": {"NVIDIA_DRIVER_CAPABILITIES": "compute,utility"}}


# --- the session -------------------------------------------------------------

class ClockSession(object):
    """Applies a policy to the GPUs of one cell and restores them.

    `gpus` is a list of (index, handle, info) where info is the
    environment.gpus entry (name, uuid, compute_capability)."""

    def __init__(self, nvml, policy, gpus, path, datasheet_base=None,
                 log=None):
        self.nvml = nvml
        self.policy = policy
        self.gpus = gpus
        self.path = path
        self.datasheet_base = datasheet_base or (lambda info: None)
        self.log = log or self.default_log
        self.state = None
        self.records = []
        self.warnings = []
        self.no_permission = False
        self._done = False
        self._writable = True

    @staticmethod
    def default_log(line):
        sys.stderr.write(line + "\n")

    # -- state file
    def _write(self):
        try:
            resultfile.write_atomic(self.path, self.state)
            return True
        except (IOError, OSError) as exc:
            self._writable = False
            self.warnings.append("cannot update the clock state file {} "
                                 "({}); no further clock changes made".format(
                                     self.path, exc))
            return False

    # -- apply
    def apply(self):
        """Apply the policy; returns the per-GPU records (also kept)."""
        originals = [read_state(self.nvml, handle)
                     for _index, handle, _info in self.gpus]
        self.records = [self._record(index, info, original)
                        for (index, _handle, info), original
                        in zip(self.gpus, originals)]
        for record in self.records:
            if record["not_at_defaults"]:
                self._announce(
                    "GPU {} ({}) was not at its default clocks when the cell "
                    "started ({}); a killed run may have left them so: see "
                    "`invoke gpu-restore`".format(
                        record["index"], record["name"],
                        "; ".join(record["not_at_defaults"])))
        if self.policy.name != OBSERVE and self._start(originals):
            self._change_all()
        return self.records

    def _start(self, originals):
        """Save the original state, so that a restore is possible; returns
        whether the policy may go on to change the GPUs."""
        self.state = new_state(self.policy.text, self.gpus, originals)
        if not self._write():
            reason = ("cannot save the original clock state to {}, so "
                      "nothing was changed".format(self.path))
            for record in self.records:
                record["refused"] = reason
            self._announce(reason)
            return False
        atexit.register(self.restore)
        return True

    def _change_all(self):
        for gpu, record, entry in zip(self.gpus, self.records,
                                      self.state["gpus"]):
            if self.no_permission or not self._writable:
                record["refused"] = record["refused"] or (
                    "not attempted: an earlier GPU refused the policy")
                continue
            self._apply_one(gpu, record, entry)
        applied = any(c["state"] in ("attempting", "applied")
                      for g in self.state["gpus"] for c in g["changes"])
        self.state["status"] = "changed" if applied else "unchanged"
        self._write()
        for (index, handle, info), record in zip(self.gpus, self.records):
            if record["applied"]:
                record["verification"] = verify(self.nvml, handle,
                                                record["applied"])

    def _record(self, index, info, original):
        return {"index": index, "uuid": info.get("uuid"),
                "name": info.get("name"), "asked": self.policy.text,
                "not_at_defaults": not_at_defaults(original),
                "target_mhz": None, "target_source": None, "applied": None,
                "attempts": [], "refused": None, "original": original,
                "verification": None, "restore": None}

    def _target(self, handle, info, original):
        if self.policy.name != LOCK:
            return base_clock(self.nvml, handle, original,
                              self.datasheet_base(info))
        maximum = original["max_clocks"].get("graphics_mhz")
        if maximum and self.policy.mhz > maximum:
            return None, ("{} is above this GPU's maximum graphics clock "
                          "({} MHz)".format(self.policy.text, maximum))
        return self.policy.mhz, "asked: {}".format(self.policy.text)

    def _apply_one(self, gpu, record, entry):
        index, handle, info = gpu
        original = record["original"]
        target, source = self._target(handle, info, original)
        record["target_mhz"], record["target_source"] = target, source
        if target is None:
            record["refused"] = source
        else:
            for method in methods_for(self.nvml, handle, info, original,
                                      target):
                if self._try_method(handle, method, record, entry) != "next":
                    break
            if record["applied"] is None and record["refused"] is None:
                record["refused"] = (
                    "no NVML method to set clocks on this GPU: " +
                    ("; ".join("{} answered {}".format(a["call"],
                                                       a["outcome"])
                               for a in record["attempts"])
                     or "no locked clocks, autoboost switch or application "
                        "clocks"))
        if record["applied"] is None:
            self._announce("GPU {} ({}): NOT applied, the cell runs with the "
                           "GPU's own clocks: {}".format(
                               index, info.get("name"), record["refused"]))
        elif not record["applied"]["complete"]:
            self._announce("GPU {} ({}): applied only in part ({}): {}".format(
                index, info.get("name"), record["applied"]["method"],
                record["refused"]))

    def _try_method(self, handle, method, record, entry):
        """Make a method's calls in order. Returns "applied" (at least one
        call took effect), "next" (its first call is not available here: try
        the next method) or "stop" (refused; no method will work)."""
        done = []
        for position, step in enumerate(method):
            change = {"what": step.what, "call": step.call,
                      "args": list(step.args), "undo_call": step.undo_call,
                      "undo_args": list(step.undo_args),
                      "state": "attempting", "error": None,
                      "restored": False, "restore_error": None}
            entry["changes"].append(change)
            # The record is on disk before the call: a SIGKILL between the
            # two leaves an `attempting` change, which a restore undoes.
            if not self._write():
                entry["changes"].pop()
                record["refused"] = "the state file could not be updated"
                break
            try:
                self.nvml.call(step.call, handle, *step.args)
            except NvmlCallError as exc:
                change["state"], change["error"] = "refused", exc.name
                self._write()
                record["attempts"].append({"call": step.call,
                                           "args": list(step.args),
                                           "outcome": exc.name})
                if exc.name == NO_PERMISSION:
                    self.no_permission = True
                    record["refused"] = \
                        "{} answered NO_PERMISSION ({})".format(
                            step.call, PERMISSION_HINT)
                    break
                if position == 0 and exc.name in FALL_THROUGH:
                    return "next"
                record["refused"] = "{} answered {}".format(step.call,
                                                            exc.name)
                break
            change["state"] = "applied"
            self._write()
            record["attempts"].append({"call": step.call,
                                       "args": list(step.args),
                                       "outcome": "applied"})
            done.append(step)
        if not done:
            return "stop"
        record["applied"] = {
            "method": done[-1].what,
            "calls": [{"call": s.call, "args": list(s.args)} for s in done],
            "complete": len(done) == len(method)}
        return "applied"

    def _announce(self, message):
        line = "clock policy {}: {}".format(self.policy.text, message)
        self.warnings.append(line)
        self.log("harness: WARNING: " + line)

    # -- restore
    def restore(self, by="harness"):
        """Undo every change, newest first; idempotent. Returns the state."""
        if self._done or self.state is None:
            return self.state
        self._done = True
        atexit.unregister(self.restore)
        handles = dict((info.get("uuid"), handle)
                       for _index, handle, info in self.gpus)
        with signals_deferred() as received:
            undo_changes(self.nvml, self.state,
                         lambda uuid: handles.get(uuid), by)
            self._write()
        if received:
            self.warnings.append(
                "signal {} arrived while the clocks were being restored; "
                "restore finished first".format(
                    ", ".join(str(s) for s in received)))
        for (index, handle, info), record, entry in zip(
                self.gpus, self.records, self.state["gpus"]):
            record["restore"] = restore_record(self.nvml, handle, entry)
        if self.state["status"] == "restore-failed":
            self._announce("restoring the clocks failed; run `invoke "
                           "gpu-restore --state {}` on this host".format(
                               self.path))
        return self.state

    def block(self):
        """Summary fields for the result's gpu_clocks block."""
        outstanding = self.state is not None and \
            self.state["status"] in OUTSTANDING
        applied = [r for r in self.records if r["applied"]]
        if self.policy.name == OBSERVE:
            mode = "observe"
            reason = "observe only: clocks read, nothing changed"
        elif applied and len(applied) == len(self.records):
            mode = "applied"
            reason = "policy applied on every GPU of the cell"
        elif applied:
            mode, reason = "partial", "policy applied on some GPUs only"
        else:
            mode = "observe"
            reason = ("policy NOT applied; the cell ran with the GPU's own "
                      "clocks: " + "; ".join(r["refused"] or "?"
                                              for r in self.records))
        return {"mode": mode, "reason": reason,
                "state_file": os.path.basename(self.path)
                if self.state is not None else None,
                "state_status": self.state["status"]
                if self.state is not None else None,
                "outstanding": outstanding}
