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
nothing about base, so the datasheet base clock from harness/peaks.py is used
(snapped to a supported clock), and the policy is refused when that is
unknown too.

Settings outlive the process, so the GPU is never changed without a record:
the original state is written to a state file (on the host side of a
container's mount) before the first set call; every call is recorded as
`attempting`, with the call that undoes it, before it is made. Restore undoes
them in reverse order (in `finally`, on SIGTERM/SIGINT through the cell's
exception path, at exit) and marks the file `restored`; after a SIGKILL the
host replays the file (`invoke gpu-restore`, dlrepro/gpu_restore.py).

Every set call needs root, and in a container CAP_SYS_ADMIN plus
NVIDIA_DRIVER_CAPABILITIES containing `utility`. Without them NVML answers
NO_PERMISSION: the cell continues in observe mode and says so loudly.

NVML locked clocks cannot be read back (there is no getter): their check is
the SM clock that telemetry measures during the timed window.
"""
import atexit
import os
import signal
import socket
import sys
import time
from collections import namedtuple

from . import blocks, resultfile
from .errors import HarnessError
from .nvml import NvmlCallError

OBSERVE = "observe"
DISABLE_BOOST = "disable-boost"
LOCK = "lock"

STATE_FORMAT = "dlrepro-gpu-clock-state"
STATE_VERSION = 1
# States a state file can be in. `pending`: changes may be under way;
# `changed`: changes applied; `restore-failed`: an undo call failed. These
# three mean the GPU may still be changed.
OUTSTANDING = ("pending", "changed", "restore-failed")

# NVML answers after which the next method may work.
FALL_THROUGH = ("NOT_SUPPORTED", "FUNCTION_NOT_FOUND")
NO_PERMISSION = "NO_PERMISSION"
PERMISSION_HINT = ("needs root, and in a container CAP_SYS_ADMIN and "
                   "NVIDIA_DRIVER_CAPABILITIES containing utility")

# The only calls a state file may ask a restore to make.
UNDO_CALLS = ("nvmlDeviceSetAutoBoostedClocksEnabled",
              "nvmlDeviceSetDefaultAutoBoostedClocksEnabled",
              "nvmlDeviceSetApplicationsClocks",
              "nvmlDeviceResetApplicationsClocks",
              "nvmlDeviceResetGpuLockedClocks")

Policy = namedtuple("Policy", "name mhz text")
Step = namedtuple("Step", "what call args undo_call undo_args")


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


# --- reading the clocks ----------------------------------------------------------

def _pair(nvml, handle, getter, *extra):
    """{graphics_mhz, memory_mhz} through `getter`, or {error: NVML's answer}."""
    graphics = nvml.const("NVML_CLOCK_GRAPHICS", 0)
    memory = nvml.const("NVML_CLOCK_MEM", 2)
    try:
        return {"graphics_mhz": nvml.call(getter, handle, graphics, *extra),
                "memory_mhz": nvml.call(getter, handle, memory, *extra)}
    except NvmlCallError as exc:
        return {"error": exc.name}


def _app_clocks(nvml, handle, which):
    # nvmlDeviceGetClock(APP_CLOCK_*) replaces the deprecated getters on new
    # drivers; the old getters are all a driver before R346 has.
    clock_id = nvml.const("NVML_CLOCK_ID_APP_CLOCK_DEFAULT" if which == "default"
                          else "NVML_CLOCK_ID_APP_CLOCK_TARGET",
                          2 if which == "default" else 1)
    pair = _pair(nvml, handle, "nvmlDeviceGetClock", clock_id)
    if "error" in pair and pair["error"] in ("FUNCTION_NOT_FOUND",
                                             "NOT_SUPPORTED",
                                             "INVALID_ARGUMENT"):
        old = ("nvmlDeviceGetDefaultApplicationsClock" if which == "default"
               else "nvmlDeviceGetApplicationsClock")
        fallback = _pair(nvml, handle, old)
        if "error" not in fallback:
            return fallback
    return pair


def read_state(nvml, handle):
    """The clock settings of one GPU that a policy may change, as read now."""
    state = {"applications_clocks": _app_clocks(nvml, handle, "target"),
             "default_applications_clocks": _app_clocks(nvml, handle,
                                                        "default"),
             "max_clocks": _pair(nvml, handle, "nvmlDeviceGetMaxClockInfo")}
    value, error = nvml.try_call("nvmlDeviceGetAutoBoostedClocksEnabled",
                                 handle)
    state["autoboost"] = ({"enabled": bool(value[0]), "default": bool(value[1])}
                          if error is None else {"error": error})
    return state


def _supported_graphics(nvml, handle, memory_mhz):
    value, error = nvml.try_call("nvmlDeviceGetSupportedGraphicsClocks",
                                 handle, memory_mhz)
    return sorted(value, reverse=True) if error is None and value else []


def _at_or_below(clocks, mhz):
    """The highest of `clocks` not above `mhz` (the lowest when all are)."""
    below = [c for c in clocks if c <= mhz]
    return max(below) if below else min(clocks)


def base_clock(nvml, handle, original, datasheet_base):
    """(MHz, where it came from) or (None, why not)."""
    default = original["default_applications_clocks"]
    maximum = original["max_clocks"].get("graphics_mhz")
    if "error" not in default and maximum and \
            default["graphics_mhz"] < maximum:
        return default["graphics_mhz"], ("default application clock "
                                          "(NVML_CLOCK_ID_APP_CLOCK_DEFAULT)")
    if datasheet_base:
        memory = default.get("memory_mhz")
        supported = _supported_graphics(nvml, handle, memory) if memory else []
        mhz = _at_or_below(supported, datasheet_base) if supported \
            else datasheet_base
        why = ("NVML has no default application clock for this GPU "
               "({})".format(default["error"]) if "error" in default else
               "the default application clock is the maximum clock")
        return mhz, ("datasheet base clock {} MHz (harness/peaks.py), because "
                     "{}".format(datasheet_base, why))
    if "error" in default:
        return None, ("no base clock: NVML has no default application clock "
                      "for this GPU ({}) and harness/peaks.py has no datasheet "
                      "base for it".format(default["error"]))
    return None, ("no base clock: the default application clock ({} MHz) is "
                  "the maximum clock, and harness/peaks.py has no datasheet "
                  "base for this GPU; use lock=<MHz>".format(
                      default["graphics_mhz"]))


def not_at_defaults(original):
    """What in a GPU's clock state differs from the driver's defaults."""
    found = []
    now = original["applications_clocks"]
    default = original["default_applications_clocks"]
    if "error" not in now and "error" not in default and now != default:
        found.append("application clocks {}/{} MHz, default {}/{} MHz".format(
            now["graphics_mhz"], now["memory_mhz"], default["graphics_mhz"],
            default["memory_mhz"]))
    autoboost = original["autoboost"]
    if "error" not in autoboost and \
            autoboost["enabled"] != autoboost["default"]:
        found.append("autoboost {} while its default is {}".format(
            "on" if autoboost["enabled"] else "off",
            "on" if autoboost["default"] else "off"))
    return found


# --- planning --------------------------------------------------------------------

def _app_undo(original):
    now = original["applications_clocks"]
    default = original["default_applications_clocks"]
    if "error" in now or "error" in default or now == default:
        return "nvmlDeviceResetApplicationsClocks", []
    return ("nvmlDeviceSetApplicationsClocks",
            [now["memory_mhz"], now["graphics_mhz"]])


def _boost_steps(original):
    """Autoboost and its default off, where the GPU has the switch."""
    autoboost = original["autoboost"]
    if "error" in autoboost:
        return []
    return [Step("autoboost", "nvmlDeviceSetAutoBoostedClocksEnabled", [0],
                 "nvmlDeviceSetAutoBoostedClocksEnabled",
                 [int(autoboost["enabled"])]),
            Step("default_autoboost",
                 "nvmlDeviceSetDefaultAutoBoostedClocksEnabled", [0, 0],
                 "nvmlDeviceSetDefaultAutoBoostedClocksEnabled",
                 [int(autoboost["default"]), 0])]


def plan(original, capability, target_mhz, app_target):
    """The methods to try, in order: each a list of Steps.

    `target_mhz` is the graphics clock for locked clocks; `app_target` is the
    (memory, graphics) pair for application clocks, or None when they cannot
    be used (no supported clock list)."""
    methods = []
    if capability is None or tuple(capability) >= (7, 0):
        methods.append([Step("locked_clocks", "nvmlDeviceSetGpuLockedClocks",
                             [target_mhz, target_mhz],
                             "nvmlDeviceResetGpuLockedClocks", [])])
    tail = _boost_steps(original)
    if app_target is not None:
        undo_call, undo_args = _app_undo(original)
        tail.append(Step("applications_clocks",
                         "nvmlDeviceSetApplicationsClocks", list(app_target),
                         undo_call, undo_args))
    if tail:
        methods.append(tail)
    return methods


def _app_target(nvml, handle, original, graphics_mhz):
    memory = original["default_applications_clocks"].get("memory_mhz") or \
        original["applications_clocks"].get("memory_mhz")
    if not memory:
        return None
    supported = _supported_graphics(nvml, handle, memory)
    if not supported:
        return None
    return memory, _at_or_below(supported, graphics_mhz)


# --- the session ------------------------------------------------------------------

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

    def _new_state(self, originals):
        return {"format": STATE_FORMAT, "version": STATE_VERSION,
                "status": "pending", "policy": self.policy.text,
                "created_at": blocks.utc_now(), "created_unix": time.time(),
                "host": socket.gethostname(),
                "pid": os.getpid(), "restored_at": None, "restored_by": None,
                "gpus": [{"index": index, "uuid": info.get("uuid"),
                          "name": info.get("name"), "original": original,
                          "changes": []}
                         for (index, _handle, info), original
                         in zip(self.gpus, originals)]}

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
        if self.policy.name == OBSERVE:
            return self.records
        self.state = self._new_state(originals)
        if not self._write():
            reason = ("cannot save the original clock state to {}, so nothing "
                      "was changed".format(self.path))
            for record in self.records:
                record["refused"] = reason
            self._announce(reason)
            return self.records
        atexit.register(self.restore)
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
                record["verification"] = self._verify(handle, record)
        return self.records

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
            capability = info.get("compute_capability")
            capability = tuple(int(p) for p in capability.split(".")) \
                if capability else None
            app_target = _app_target(self.nvml, handle, original, target)
            methods = plan(original, capability, target, app_target)
            for method in methods:
                if self._try_method(handle, method, record, entry) != "next":
                    break
            if record["applied"] is None and record["refused"] is None:
                record["refused"] = (
                    "no NVML method to set clocks on this GPU: " +
                    ("; ".join("{} answered {}".format(a["call"], a["outcome"])
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
                    record["refused"] = "{} answered NO_PERMISSION ({})".format(
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

    def _verify(self, handle, record):
        now = read_state(self.nvml, handle)
        checks = {}
        for call in record["applied"]["calls"]:
            if call["call"] == "nvmlDeviceSetApplicationsClocks":
                want = {"memory_mhz": call["args"][0],
                        "graphics_mhz": call["args"][1]}
                checks["applications_clocks"] = \
                    now["applications_clocks"] == want
            elif call["call"] == "nvmlDeviceSetAutoBoostedClocksEnabled":
                checks["autoboost"] = now["autoboost"].get("enabled") is False
            elif call["call"] == \
                    "nvmlDeviceSetDefaultAutoBoostedClocksEnabled":
                checks["default_autoboost"] = \
                    now["autoboost"].get("default") is False
        locked = any(c["call"] == "nvmlDeviceSetGpuLockedClocks"
                     for c in record["applied"]["calls"])
        return {"read_back": now, "checks": checks,
                "ok": all(checks.values()) if checks else None,
                "note": ("locked clocks have no NVML getter: the telemetry's "
                         "SM clock during the timed window is their check"
                         if locked else None)}

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
        with _signals_deferred() as received:
            undo_changes(self.nvml, self.state,
                         lambda uuid: handles.get(uuid), by)
            self._write()
        if received:
            self.warnings.append("signal {} arrived while the clocks were "
                                 "being restored; restore finished first".format(
                                     ", ".join(str(s) for s in received)))
        for (index, handle, info), record, entry in zip(
                self.gpus, self.records, self.state["gpus"]):
            record["restore"] = _restore_record(self.nvml, handle, entry)
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
            mode, reason = "observe", "observe only: clocks read, nothing changed"
        elif applied and len(applied) == len(self.records):
            mode, reason = "applied", "policy applied on every GPU of the cell"
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


def _restore_record(nvml, handle, entry):
    undone = [c for c in entry["changes"] if c["state"] in
              ("attempting", "applied")]
    if not undone:
        return None
    errors = [c["restore_error"] for c in undone if c["restore_error"]]
    now = read_state(nvml, handle)
    original = entry["original"]
    same = all(now[key] == original[key] for key in
               ("applications_clocks", "autoboost"))
    return {"undone": [c["undo_call"] for c in reversed(undone)],
            "errors": errors, "matches_original": same,
            "note": ("locked clocks were reset to the driver's default "
                     "(NVML cannot read them)" if any(
                         c["what"] == "locked_clocks" for c in undone)
                     else None)}


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
            if change.get("undo_call") not in UNDO_CALLS:
                change["restore_error"] = "REFUSED_CALL"
                failed = True
                continue
            if handle is None:
                handle = handle_for(entry.get("uuid"))
            if handle is None:
                change["restore_error"] = "GPU_NOT_FOUND"
                failed = True
                continue
            try:
                nvml.call(change["undo_call"], handle,
                          *change.get("undo_args", []))
            except NvmlCallError as exc:
                change["restore_error"] = exc.name
                failed = True
            else:
                change["restored"] = True
                change["restore_error"] = None
    if state.get("status") != "unchanged" or failed:
        state["status"] = "restore-failed" if failed else "restored"
    state["restored_at"] = blocks.utc_now()
    state["restored_by"] = by
    return state


class _signals_deferred(object):
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
