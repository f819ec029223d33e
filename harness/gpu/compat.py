"""The compatibility gate: can a framework build run on this GPU and driver?

Checked before a GPU cell starts its framework, from the profile's kernel list
(the `stack` the host puts into the spec, from dockerfiles/matrix.toml) and
what NVML reports, so that a stack that cannot run ends as `unsupported` with
the reason instead of a CUDA error deep inside the framework (MXNet 1.9.1
cu112 carries sm_50..sm_86 machine code and no PTX: it cannot run on sm_90).

CUDA's rules, as this module applies them:
- SASS (machine code) for sm_XY runs on devices of the same major version X
  with minor >= Y: sm_80 runs on sm_86, never on sm_90 or sm_75.
  Architecture-specific code (sm_90a) runs only on exactly that device;
  family code (sm_100f) on the same major with minor >= Y.
- PTX for compute_XY is compiled by the driver (JIT) for any device of
  compute capability >= X.Y. The first use compiles, which can take minutes
  for a whole framework: the cell's warm-up must absorb it. The driver must
  also know the PTX's ISA, which a driver older than the toolkit's own does
  not (CUDA's minor-version compatibility does not cover PTX).
- The driver must be at least the profile's min_driver.

Pure functions only: nothing here calls NVML.
"""
import re
from collections import namedtuple

from ..errors import HarnessError

NATIVE = "native"
PTX_JIT = "ptx-jit"
UNSUPPORTED = "unsupported"
DRIVER_TOO_OLD = "driver-too-old"
UNKNOWN = "unknown"
# Verdicts that end a cell as `unsupported` before its framework starts.
BLOCKING = (UNSUPPORTED, DRIVER_TOO_OLD)

Arch = namedtuple("Arch", "kind major minor suffix text")

_ARCH = re.compile(r"^(sm|compute)_(\d+)(\d)([af]?)$")

# The driver each CUDA toolkit release shipped with (CUDA release notes,
# "CUDA Toolkit and Corresponding Driver Versions", Linux, GA releases).
# Newer toolkits run on older drivers of the same major through minor-version
# compatibility, but their PTX cannot be JIT-compiled there.
TOOLKIT_DRIVERS = {
    "10.0": "410.48", "10.1": "418.39", "10.2": "440.33",
    "11.0": "450.51.05", "11.1": "455.23", "11.2": "460.27.03",
    "11.3": "465.19.01", "11.4": "470.42.01", "11.5": "495.29.05",
    "11.6": "510.39.01", "11.7": "515.43.04", "11.8": "520.61.05",
    "12.0": "525.60.13", "12.1": "530.30.02", "12.2": "535.54.03",
    "12.3": "545.23.06", "12.4": "550.54.14", "12.5": "555.42.02",
    "12.6": "560.28.03", "12.8": "570.26", "12.9": "575.51.03",
    "13.0": "580.65.06",
}


def parse_arch(text):
    """`sm_86`, `sm_90a`, `sm_100f`, `compute_86` -> Arch."""
    match = _ARCH.match(text.strip()) if isinstance(text, str) else None
    if not match:
        raise HarnessError("architecture must look like sm_86, sm_90a or "
                           "compute_86, got {!r}".format(text))
    kind, major, minor, suffix = match.groups()
    return Arch(kind, int(major), int(minor), suffix, text.strip())


def parse_capability(value):
    """(9, 0), [9, 0] or "9.0" -> (9, 0)."""
    if isinstance(value, str):
        parts = value.split(".")
        if len(parts) == 2 and all(p.isdigit() for p in parts):
            return int(parts[0]), int(parts[1])
    elif isinstance(value, (tuple, list)) and len(value) == 2 and \
            all(isinstance(v, int) for v in value):
        return int(value[0]), int(value[1])
    raise HarnessError("compute capability must look like 9.0, got "
                       "{!r}".format(value))


def parse_version(text):
    """"525.60.13" -> (525, 60, 13); None for an empty or odd string."""
    if not isinstance(text, str) or not text.strip():
        return None
    parts = text.strip().split(".")
    if not all(p.isdigit() for p in parts):
        return None
    return tuple(int(p) for p in parts)


def check_stack(stack):
    """Validate the spec's `stack` (None when the spec has none); returns it
    with `sass` as a list and `ptx` as a list (possibly empty)."""
    if stack is None:
        return None
    if not isinstance(stack, dict):
        raise HarnessError("spec stack must be an object, got {!r}".format(stack))
    sass = stack.get("sass", [])
    if not isinstance(sass, list):
        raise HarnessError("spec stack.sass must be a list like [\"sm_80\"], "
                           "got {!r}".format(sass))
    ptx = stack.get("ptx", "")
    ptx = [ptx] if isinstance(ptx, str) else ptx
    if not isinstance(ptx, list):
        raise HarnessError("spec stack.ptx must be a string like "
                           "\"compute_86\" or \"\", got {!r}".format(ptx))
    ptx = [p for p in ptx if p]
    for text in sass:
        if parse_arch(text).kind != "sm":
            raise HarnessError("spec stack.sass lists machine code (sm_XY), "
                               "got {!r}".format(text))
    for text in ptx:
        if parse_arch(text).kind != "compute":
            raise HarnessError("spec stack.ptx names a virtual architecture "
                               "(compute_XY), got {!r}".format(text))
    for key in ("min_driver", "cuda"):
        value = stack.get(key, "")
        if value is not None and not isinstance(value, str):
            raise HarnessError("spec stack.{} must be a string, got "
                               "{!r}".format(key, value))
    checked = dict(stack)
    checked["sass"] = list(sass)
    checked["ptx"] = ptx
    return checked


def sass_runs(arch, capability):
    """Whether machine code for `arch` executes on a device of `capability`."""
    major, minor = capability
    if arch.suffix == "a":
        return (arch.major, arch.minor) == (major, minor)
    return arch.major == major and minor >= arch.minor


def ptx_runs(arch, capability):
    """Whether PTX for `arch` can be JIT-compiled for `capability`."""
    if arch.suffix == "a":
        return (arch.major, arch.minor) == tuple(capability)
    if arch.suffix == "f":
        return arch.major == capability[0] and capability[1] >= arch.minor
    return tuple(capability) >= (arch.major, arch.minor)


def _arch_name(capability):
    return "sm_{}{}".format(capability[0], capability[1])


def _listing(archs):
    return ", ".join(a.text for a in archs) if archs else "none"


def check(capability, driver, stack):
    """The gate's verdict for a device of `capability` ((9, 0), "9.0" or
    None when unknown) with `driver` ("580.65.06" or None) running `stack`
    (a dict from `check_stack`, or None when the spec has none).

    Returns {"verdict", "reason", "device", "driver", "min_driver",
    "runs_as", "warnings"}; the cell stops when the verdict is in BLOCKING.
    """
    result = {"verdict": UNKNOWN, "reason": None, "device": None,
              "driver": driver, "min_driver": None, "runs_as": None,
              "warnings": []}
    if stack is None:
        result["reason"] = ("the spec carries no stack (kernel list, minimum "
                            "driver); nothing to check")
        return result
    stack = check_stack(stack)
    sass = [parse_arch(t) for t in stack["sass"]]
    ptx = [parse_arch(t) for t in stack["ptx"]]
    min_driver = stack.get("min_driver") or None
    result["min_driver"] = min_driver
    if capability is None:
        result["reason"] = ("the GPU's compute capability is unknown (NVML "
                            "unavailable); the stack was not checked")
        return result
    capability = parse_capability(capability)
    device = _arch_name(capability)
    result["device"] = device
    have, need = parse_version(driver), parse_version(min_driver)
    if have is None and isinstance(driver, str) and driver.strip():
        # NVML answered with something else than a version: nothing it
        # says about this driver can be compared with the stack's needs.
        result["reason"] = ("the driver reports version {!r}, which is not "
                            "a version; the stack was not checked".format(
                                driver))
        return result
    if need is not None and have is not None and have < need:
        result["verdict"] = DRIVER_TOO_OLD
        result["reason"] = ("driver {} is older than the {} this stack needs "
                            "(CUDA {})".format(driver, min_driver,
                                               stack.get("cuda") or "?"))
        return result
    if need is not None and have is None:
        result["warnings"].append("the driver version is unknown; the stack "
                                  "needs {}".format(min_driver))
    if not sass and not ptx:
        if stack.get("cuda"):
            result["reason"] = ("the profile lists no kernels (sass and ptx "
                                "are empty); not checked")
            return result
        result["verdict"] = UNSUPPORTED
        result["reason"] = "the profile is a CPU build (no CUDA kernels)"
        return result
    return _kernels(result, stack, sass, ptx, capability, have)


def _kernels(result, stack, sass, ptx, capability, have):
    """check()'s verdict from the kernels: machine code that runs on the
    device, else PTX the driver can JIT-compile, else unsupported."""
    device, driver = result["device"], result["driver"]
    native = [a for a in sass if sass_runs(a, capability)]
    if native:
        best = max(native, key=lambda a: (a.minor, a.suffix == "a"))
        result["verdict"] = NATIVE
        result["runs_as"] = best.text
        result["reason"] = "machine code {} runs on {}".format(best.text,
                                                               device)
        return result
    jit = [a for a in ptx if ptx_runs(a, capability)]
    if jit:
        best = max(jit, key=lambda a: (a.major, a.minor))
        result["verdict"] = PTX_JIT
        result["runs_as"] = best.text
        result["reason"] = ("no machine code for {} (has {}); the driver "
                            "JIT-compiles PTX {} on first use".format(
                                device, _listing(sass), best.text))
        shipped = TOOLKIT_DRIVERS.get(_major_minor(stack.get("cuda")))
        if shipped and have is not None and have < parse_version(shipped):
            result["warnings"].append(
                "PTX from CUDA {} may need driver {} or newer to JIT-compile "
                "(this one is {}): minor-version compatibility does not "
                "cover PTX".format(stack.get("cuda"), shipped, driver))
        return result
    result["verdict"] = UNSUPPORTED
    result["reason"] = ("no machine code for {} (has {}) and no PTX it could "
                        "JIT-compile (has {})".format(device, _listing(sass),
                                                      _listing(ptx)))
    return result


def _major_minor(version):
    parts = (version or "").split(".")
    return ".".join(parts[:2]) if len(parts) >= 2 else None
