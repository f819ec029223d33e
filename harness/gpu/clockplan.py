"""Reading a GPU's clock settings through NVML, choosing the calls that apply
a clock policy, and checking them afterwards (harness/gpu/clocks.py runs them).

"Base" is the default application clock (NVML_CLOCK_ID_APP_CLOCK_DEFAULT):
NVML has no base-clock query, and on boards with application clocks the
default is the clock the GPU holds without boost. Where the default equals
the maximum clock (Hopper boards: boost is the default), the datasheet base
clock from harness/gpu/peaks.py is used instead, snapped to a supported clock.
"""
from collections import namedtuple

from .nvml import NvmlCallError

Step = namedtuple("Step", "what call args undo_call undo_args")


# --- reading the clocks ------------------------------------------------------

def _pair(nvml, handle, getter, *extra):
    """{graphics_mhz, memory_mhz} through `getter`, or {error: NVML's
    answer}."""
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
    default = which == "default"
    clock_id = nvml.const("NVML_CLOCK_ID_APP_CLOCK_DEFAULT" if default
                          else "NVML_CLOCK_ID_APP_CLOCK_TARGET",
                          2 if default else 1)
    pair = _pair(nvml, handle, "nvmlDeviceGetClock", clock_id)
    if "error" in pair and pair["error"] in ("FUNCTION_NOT_FOUND",
                                             "NOT_SUPPORTED",
                                             "INVALID_ARGUMENT"):
        old = ("nvmlDeviceGetDefaultApplicationsClock" if default
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
    state["autoboost"] = ({"enabled": bool(value[0]),
                           "default": bool(value[1])}
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
        return mhz, ("datasheet base clock {} MHz (harness/gpu/peaks.py), "
                     "because {}".format(datasheet_base, why))
    if "error" in default:
        return None, ("no base clock: NVML has no default application clock "
                      "for this GPU ({}) and harness/gpu/peaks.py has no "
                      "datasheet base for it".format(default["error"]))
    return None, ("no base clock: the default application clock ({} MHz) is "
                  "the maximum clock, and harness/gpu/peaks.py has no "
                  "datasheet base for this GPU; use lock=<MHz>".format(
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


# --- planning ----------------------------------------------------------------

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


def app_target(nvml, handle, original, graphics_mhz):
    """(memory, graphics) application clocks nearest `graphics_mhz` at or
    below it, or None where the GPU lists no supported clocks."""
    memory = original["default_applications_clocks"].get("memory_mhz") or \
        original["applications_clocks"].get("memory_mhz")
    if not memory:
        return None
    supported = _supported_graphics(nvml, handle, memory)
    if not supported:
        return None
    return memory, _at_or_below(supported, graphics_mhz)


def methods_for(nvml, handle, info, original, target_mhz):
    """plan() for one GPU (`info`: its environment.gpus entry)."""
    capability = info.get("compute_capability")
    capability = tuple(int(p) for p in capability.split(".")) \
        if capability else None
    return plan(original, capability, target_mhz,
                app_target(nvml, handle, original, target_mhz))


# --- checking ----------------------------------------------------------------

def verify(nvml, handle, applied):
    """Read back what the `applied` calls set (locked clocks have no getter:
    their check is the SM clock that telemetry measures)."""
    now = read_state(nvml, handle)
    checks = {}
    for call in applied["calls"]:
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
                 for c in applied["calls"])
    return {"read_back": now, "checks": checks,
            "ok": all(checks.values()) if checks else None,
            "note": ("locked clocks have no NVML getter: the telemetry's "
                     "SM clock during the timed window is their check"
                     if locked else None)}


def restore_record(nvml, handle, entry):
    """What restoring one GPU's state-file `entry` undid, and whether its
    clocks now read as they did before (None: nothing was changed)."""
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
